"""The playbook expression language: Jinja2 expressions and templates in a bounded sandbox, and RE2 log patterns."""
