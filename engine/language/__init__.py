"""The playbook language: the typed playbook model, loading with file:line errors, clauses, actions, matching, planning, replay, drafting."""
