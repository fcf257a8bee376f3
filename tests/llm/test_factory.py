"""build_llm picks the backend from the settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from service.llm import OpenAICompatibleClient
from service.llm.embedded import EmbeddedLLMClient, default_model_path
from service.llm.factory import build_llm


async def test_a_base_url_selects_the_openai_compatible_server(tmp_path: Path) -> None:
    client = build_llm(Settings(data_dir=tmp_path, llm_base_url="http://llm.test/v1"))
    assert isinstance(client, OpenAICompatibleClient)
    await client.aclose()


async def test_without_a_base_url_the_embedded_model_is_loaded(tmp_path: Path) -> None:
    client = build_llm(Settings(data_dir=tmp_path, llm_embedded_threads=1))
    assert isinstance(client, EmbeddedLLMClient)
    try:
        assert client.name == "embedded"
        assert client.context == 2048
        answer = await client.complete([{"role": "user", "content": "Hi"}], max_tokens=2)
        assert answer.completion_tokens > 0
    finally:
        await client.aclose()


async def test_embedded_settings_are_used(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        llm_embedded_path=default_model_path(),
        llm_embedded_threads=1,
        llm_embedded_context=256,
        llm_deadline_s=7.0,
    )
    client = build_llm(settings)
    assert isinstance(client, EmbeddedLLMClient)
    try:
        assert (client.context, client.deadline_s) == (256, 7.0)
    finally:
        await client.aclose()


def test_load_llm_false_means_no_embedded_model(tmp_path: Path) -> None:
    assert build_llm(Settings(data_dir=tmp_path, load_llm=False)) is None


async def test_load_llm_false_does_not_turn_off_a_server(tmp_path: Path) -> None:
    client = build_llm(
        Settings(data_dir=tmp_path, load_llm=False, llm_base_url="http://llm.test/v1")
    )
    assert isinstance(client, OpenAICompatibleClient)
    await client.aclose()


def test_a_missing_model_file_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="TAILOR_LLM_EMBEDDED_PATH"):
        build_llm(Settings(data_dir=tmp_path, llm_embedded_path=tmp_path / "none.gguf"))
