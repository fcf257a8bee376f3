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
