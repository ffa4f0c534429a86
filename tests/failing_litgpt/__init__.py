"""A test-only trainer kind: real litgpt `pretrain`, run through a wrapper that raises a failure no
shipped playbook knows once litgpt has logged step N (tests/language/test_draft_playbook.py)."""
