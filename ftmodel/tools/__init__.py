"""What is built on the predictor: framework comparison, reports, live validation, the demo,
the built-in model zoo and the validation corpus. Nothing in :mod:`ftmodel`'s prediction path
imports these."""
