"""The embedded host `local`: llama-server and vLLM as child processes of this one."""
