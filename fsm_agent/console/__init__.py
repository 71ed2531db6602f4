"""The local web console (`fsm-agent console`): runs, one run live and reviewed, charts."""
