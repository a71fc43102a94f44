"""What the server shows about itself: per-turn timelines and Prometheus metrics
(:mod:`.metrics`), optional OpenTelemetry spans (:mod:`.tracing`) and the logging set-up
(:mod:`.logs`)."""
