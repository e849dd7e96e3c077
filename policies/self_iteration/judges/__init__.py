"""The judges that answer satisfaction, domain and skill-intent questions: deterministic rules, and an OpenAI-compatible adapter."""
