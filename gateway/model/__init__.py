"""The model client: litellm calls with our retries and fallbacks, errors, usage and cost."""
