"""Transports translate between a wire protocol and a session; they hold no pipeline logic."""
