"""Kubernetes API stand-in for the sandbox (see README.md in this folder)."""
