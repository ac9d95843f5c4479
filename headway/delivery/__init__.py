"""Outgoing messages: the retry policy webhooks and channels share (`delivery.policy`),
Standard Webhooks signing and the address guard (`delivery.webhooks`), and the worker
that sends the outbox (`delivery.worker`)."""
