"""The plan: its typed model, the pure scheduler, validation, diffs, and text formats.

Imports only `errors` and `records` from planexec: a plan can be built,
checked, diffed and scheduled with no model, worker or engine in sight.
"""
