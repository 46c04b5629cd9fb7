"""The plan library: plans kept as named, versioned templates, run again without a planner, and reused for goals that fit them."""
