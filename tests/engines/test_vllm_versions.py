"""What differs between the vLLM versions df_ray has met: ``AsyncLLM.get_tokenizer`` a
coroutine (the older V1 engine) or a plain method, and a request too long for the model
refused with ``VLLMValidationError`` (a ``ValueError`` in some versions, not in 0.32) or a
plain ``ValueError``. vLLM itself is not needed: a stand-in engine with each shape of the API."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from types import SimpleNamespace

import pytest

from df_ray.engines import make_spec
from df_ray.engines.vllm import VLLMEngine, too_long


class ValidationError(ValueError):
    """The shape of vllm.exceptions.VLLMValidationError (a ValueError with parameter/value)."""

    def __init__(self, message, *, parameter=None, value=None):
        super().__init__(message)
        self.parameter, self.value = parameter, value


def test_overflow_is_told_in_every_version():
    old = ValueError("The decoder prompt (length 300) is longer than the maximum model "
                     "length of 128. Make sure that `max_model_len` is no smaller than ...")
    new = ValidationError("This model's maximum context length is 128 tokens. However, your "
                          "request has 300 input tokens.", parameter="input_tokens", value=300)
    assert too_long(old) and too_long(new)
    assert not too_long(ValueError("temperature must be non-negative, got -1"))
    assert not too_long(ValidationError("bad top_p", parameter="top_p", value=2))
    assert not too_long(RuntimeError("length"))  # not a refusal of the request


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllms_own_validation_error_is_told():
    from vllm.exceptions import VLLMValidationError

    # 0.32 raises it for a prompt longer than the model's context, and it is no ValueError
    e = VLLMValidationError("The decoder prompt (length 300) is longer than the maximum model "
                            "length of 128.")
    assert too_long(e)
    assert too_long(VLLMValidationError("too long", parameter="input_text", value=300))
    assert not too_long(VLLMValidationError("bad top_p", parameter="top_p", value=2))


class Tokenizer:
    chat_template = "{{ messages }}"


def _engine(get_tokenizer) -> VLLMEngine:
    """A VLLMEngine around a stand-in AsyncLLM (its loop thread as the real one runs)."""
    eng = object.__new__(VLLMEngine)
    eng._loop = asyncio.new_event_loop()
    eng._thread = threading.Thread(target=eng._loop.run_forever, daemon=True)
    eng._thread.start()
    config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=128),
                             scheduler_config=SimpleNamespace(max_num_seqs=1024))
    eng.engine = SimpleNamespace(get_tokenizer=get_tokenizer, vllm_config=config)
    return eng


@pytest.mark.parametrize("kind", ["coroutine", "method"])
def test_get_tokenizer_either_way(kind):
    tok = Tokenizer()

    async def as_coroutine():
        return tok

    eng = _engine(as_coroutine if kind == "coroutine" else (lambda: tok))
    try:
        eng._configure(make_spec(kind="vllm", model="m/m"))
        assert eng.tokenizer is tok and eng.prompt_format == "chat"
        assert (eng.max_model_len, eng.capacity) == (128, 1024)
    finally:
        eng._stop_loop()
