"""The chat uses memory: before answering, the facts relevant to the message are given to the
model with their ids; the answer says which it used; a question asked again is answered from
what was saved the first time. The fake Ollama embeds with all-MiniLM-L6-v2 in numpy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from diana.core.chat.turn_events import MemoryRecalled, TurnFinished
from diana.core.runtime import Profile, Runtime

from .chat_turns import Events, call, chat_requests
from .conftest import stepping_clock
from .memory_eval import minilm_ollama, write_settings


def memory_notes(request: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in request["messages"]
        if m["role"] == "system" and m["content"].startswith("From memory")
    ]


async def open_chat(config_dir: Path, data_dir: Path, url: str) -> Runtime:
    write_settings(config_dir, url)
    return await Runtime.open(
        Profile.APP.but(servers="none", share=False, watch=False),
        config_dir,
        data_dir,
        clock=stepping_clock(),
    )


async def test_the_model_is_given_the_relevant_fact_with_its_id_and_the_answer_cites_it(
    config_dir: Path, data_dir: Path
) -> None:
    with minilm_ollama() as fake:
        async with await open_chat(config_dir, data_dir, fake.url) as runtime:
            car = (await runtime.memory.save("The user's car is a blue 2018 Honda Civic.")).fact
            await runtime.memory.save("The user's dentist appointment is on March 3.")
            fake.add({"content": f"You drive a blue 2018 Honda Civic [fact {car.id}]."})
            events = Events()
            outcome = await runtime.chat.run_turn("What vehicle do I drive?", events)

    [request] = chat_requests(fake)
    [note] = memory_notes(request)
    assert f"[fact {car.id}] (saved 2026-03-14) The user's car is a blue 2018 Honda Civic." in note
    assert "dentist" not in note
    assert request["messages"][-1] == {"role": "user", "content": "What vehicle do I drive?"}
    assert "cite it as [fact N]" in request["messages"][0]["content"]
    # The facts are known before the first token streams.
    kinds = events.kinds()
    assert kinds.index("MemoryRecalled") < kinds.index("Delta")
    [recalled] = events.of(MemoryRecalled)
    assert [f.id for f in recalled.facts] == [car.id] and recalled.mode == "hybrid"
    response = outcome.response
    assert response is not None
    assert [(f.id, f.content) for f in response.facts_used] == [(car.id, car.content)]
    assert f"From memory: fact {car.id} (saved 2026-03-14)" in response.reasoning
    assert events.of(TurnFinished)[0].response.facts_used == response.facts_used


async def test_a_message_memory_cannot_answer_is_sent_without_facts(
    config_dir: Path, data_dir: Path
) -> None:
    with minilm_ollama() as fake:
        async with await open_chat(config_dir, data_dir, fake.url) as runtime:
            await runtime.memory.save("The user's car is a blue 2018 Honda Civic.")
            fake.add({"content": "I do not know your favourite ice cream."})
            events = Events()
            outcome = await runtime.chat.run_turn("What is my favourite ice cream flavour?", events)

    [request] = chat_requests(fake)
    assert memory_notes(request) == []
    assert events.of(MemoryRecalled) == []
    assert outcome.response is not None and outcome.response.facts_used == []


async def test_a_question_asked_again_is_answered_from_memory(
    config_dir: Path, data_dir: Path
) -> None:
    question = "What is the boiling point of water on Mount Everest?"
    finding = "Water boils at about 70 °C on the summit of Mount Everest."
    with minilm_ollama() as fake:
        async with await open_chat(config_dir, data_dir, fake.url) as runtime:
            fake.add(
                call("save_fact", content=finding, metadata={"topic": "physics"}),
                {"content": "About 70 °C; I saved that for next time."},
            )
            first = await runtime.chat.run_turn(question, Events())
            runtime.chat.clear()  # next month: a new conversation
            fake.add({"content": "About 70 °C [fact 1]."})
            again = await runtime.chat.run_turn(question, Events())

    first_request, _tool_round, second_request = chat_requests(fake)
    assert memory_notes(first_request) == []
    [note] = memory_notes(second_request)
    assert f"[fact 1] (saved 2026-03-14) {finding}" in note
    assert first.response is not None and first.response.facts_used == []
    assert again.response is not None
    assert [f.content for f in again.response.facts_used] == [finding]
    assert again.response.tool_calls == []  # no tool run again


async def test_a_stopped_memory_gives_the_model_no_fact_and_a_started_one_does_again(
    config_dir: Path, data_dir: Path
) -> None:
    question = "What vehicle do I drive?"
    with minilm_ollama() as fake:
        async with await open_chat(config_dir, data_dir, fake.url) as runtime:
            await runtime.memory.save("The user's car is a blue 2018 Honda Civic.")
            await runtime.switch_agent("memory", stop=True)
            fake.add({"content": "I do not know."})
            events = Events()
            await runtime.chat.run_turn(question, events)
            await runtime.switch_agent("memory", stop=False)
            runtime.chat.clear()
            fake.add({"content": "A Honda Civic [fact 1]."})
            await runtime.chat.run_turn(question, Events())

    stopped, started = chat_requests(fake)
    assert memory_notes(stopped) == []
    assert "Honda" not in json.dumps(stopped)
    assert events.of(MemoryRecalled) == []
    assert "Honda Civic" in memory_notes(started)[0]
