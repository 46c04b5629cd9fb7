"""The goal path: a goal taken through routing, planning, review, execution and joining, as one library call."""
