"""The LLM side of the search: endpoint config (config.py), a thread-safe OpenAI-compatible
chat-completions client on the standard library (client.py), and token/cost accounting with
the run's budget (accounting.py)."""
