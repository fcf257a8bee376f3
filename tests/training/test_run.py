from pathlib import Path


def test_personalens_attributes_become_statements() -> None:
    import random

    from service.training.run import as_statement, as_statement_rows

    rng = random.Random(0)
    forms = {
        as_statement("Rental Cars - Preferred Rental Company: Avis, Hertz", rng) for _ in range(40)
    }
    assert len(forms) == 4
    assert all("Avis, Hertz" in f and f.startswith(("The user", "For ", "When ")) for f in forms)
    assert as_statement("no structure here", rng) == "no structure here"
    rows = [{"prompt": "p", "attributes": ["A - B: c", "D - E: f"], "relevant": [1]}]
    converted = as_statement_rows(rows, 1)
    assert converted[0]["relevant"] == [1] and rows[0]["attributes"] == ["A - B: c", "D - E: f"]
    assert all(a != b for a, b in zip(converted[0]["attributes"], rows[0]["attributes"]))


def test_everyday_relevance_examples_label_every_fact_of_the_profile() -> None:
    from service.training.run import _everyday_examples

    rows = [
        {
            "prompt": "quick dinner idea?",
            "attributes": ["The user is vegetarian.", "The user has a cat.", "The user runs."],
            "relevant": [0],
        },
        {
            "prompt": "is my cat too fat",
            "attributes": ["The user has a cat.", "The user lives in Oslo.", "The user sings."],
            "relevant": [0],
        },
    ]
    examples = _everyday_examples(rows, seed=0)
    own = [
        (e.a, e.b, e.label)
        for e in examples
        if e.b in rows[0]["attributes"] and e.a == rows[0]["prompt"]
    ]
    assert sorted(own) == sorted(
        [
            ("quick dinner idea?", "The user is vegetarian.", 1.0),
            ("quick dinner idea?", "The user has a cat.", 0.0),
            ("quick dinner idea?", "The user runs.", 0.0),
        ]
    )
    # Facts of other profiles are added as easy negatives, never as positives.
    foreign = [e for e in examples if e.a == rows[0]["prompt"] and e.b not in rows[0]["attributes"]]
    assert foreign and all(e.label == 0.0 for e in foreign)


def test_everyday_verifier_rows_are_read_in_the_first_person(tmp_path: Path) -> None:
    import json

    from service.training.verifier import everyday_rows, window_examples

    long = "So much going on. " * 12 + "My sister is a nurse and I teach maths. " + "Ok bye. " * 30
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps(
            {
                "conversation": [{"role": "user", "content": long}],
                "attribute": "The user teaches maths.",
                "label": "supported",
                "message_index": 0,
                "quote": "I teach maths",
                "category": "plain",
            }
        )
        + "\n"
    )
    (row,) = everyday_rows(path)
    assert row["attribute"] == "I teach maths." and row["supported"]
    # A long message is several windows: the positive is the one holding the quote.
    positives = [e for e in window_examples([row]) if e.label == 1.0]
    assert len(positives) == 1 and "I teach maths" in positives[0].b


def test_extractor_examples_label_the_clause_that_holds_a_quote() -> None:
    from service.training import extractor as extractor_data

    row = {
        "conversation": [
            {
                "role": "user",
                "content": "can you suggest a dinner? I'm vegetarian and my husband hates "
                "mushrooms with a passion, so that rules out half of what I make lol",
            }
        ],
        "facts": [
            {"text": "The user is vegetarian.", "message_index": 0, "quote": "I'm vegetarian"},
            {
                "text": "The user's husband hates mushrooms.",
                "message_index": 0,
                "quote": "my husband hates mushrooms",
            },
        ],
    }
    labelled = {c.text: y for c, y in extractor_data.labelled_clauses([row])}
    assert labelled["I'm vegetarian"] == 1
    assert labelled["my husband hates mushrooms with a passion"] == 1
    assert labelled["can you suggest a dinner"] == 0
    assert extractor_data.coverage([row]) == 1.0
    examples = extractor_data.examples([row])
    assert {e.label for e in examples} == {0.0, 1.0}
    assert all(e.b.startswith("user: ") for e in examples)


def test_everyday_case_ids_name_their_writer() -> None:
    from service.training.run import _writer

    assert _writer("V-AE-018-6") == "AE"
    assert _writer("V-Z5-087-6") == "Z5"
    assert _writer(None) == "" and _writer("plain") == ""
