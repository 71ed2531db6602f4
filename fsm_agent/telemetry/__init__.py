"""Traces: a run as one OpenTelemetry trace in the GenAI semantic conventions, built from the
journal and sent live (`fsm-agent run --otel`) or after the fact (`fsm-agent export-traces`)."""
