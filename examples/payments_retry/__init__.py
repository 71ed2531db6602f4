"""The payments retry agent: success only from capture receipts and the webhook."""
