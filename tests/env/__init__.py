"""Checks of the machine-facing files: the set-up leaves a clean environment, the container and
deployment files validate and agree with scripts/setup.sh.  No models, no fakes."""
