"""An LLM judge for judged tasks (mmhal, hallusion): a local model served by `vllm serve`, or any
OpenAI-compatible server.

    config.py   JudgeConfig, the `judge:` section (--judge PATH|URL, --judge-model NAME)
    client.py   the chat-completions client: bounded concurrency, bounded retries, a reply size cap
    server.py   starts vLLM's OpenAI server on DIR from the project's vLLM environment, stops it on every exit
    judge.py    Judge: checks the setup and states the judge's identity before any generation, then judges
                requests through a reply cache keyed by that identity (a killed run resumes without re-asking)

docs/judge.md describes the whole.
"""
