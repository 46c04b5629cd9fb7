"""Governance: policies that review a plan, and the review a person or a policy gives before it runs."""
