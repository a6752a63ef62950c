"""Test support: helpers that start real things (brokers, sshd, the Kubernetes API emulator)."""
