"""The count expression evaluator: arithmetic, facts, the shown working, and every kind of fault."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from parinfo.profiles import expr
from parinfo.profiles.expr import ExprError, evaluate

FACTS = {"physical_cores": 28, "usable_cpus": 56, "numa_nodes": 2}


@pytest.mark.parametrize("text, value", [
    ("4", 4),
    ("physical_cores // 2", 14),
    ("usable_cpus - physical_cores * 2 + 1", 1),
    ("(usable_cpus - physical_cores) * 2", 56),
    ("min(usable_cpus, 8)", 8),
    ("max(1, physical_cores // 64)", 1),
    ("min(max(2, 3), 10, numa_nodes)", 2),
    ("-2 + 5", 3),
    ("- -3", 3),
    ("7 // 2 * 2", 6),
    ("1 - 2 - 3", -4),
    ("  physical_cores  ", 28),
])
def test_arithmetic_and_precedence(text, value):
    assert evaluate(text, FACTS).value == value


def test_working_shows_the_numbers_used():
    res = evaluate("physical_cores // 2", FACTS)
    assert res.substituted == "28 // 2"
    assert res.used == ("physical_cores",)
    assert evaluate("min(usable_cpus, numa_nodes * 4)", FACTS).substituted == "min(56, 2 * 4)"


@pytest.mark.parametrize("text, column, words", [
    ("", 1, "empty expression"),
    ("physical_core", 1, "unknown name 'physical_core'"),
    ("usable_cpus ^ 2", 13, "unexpected character '^'"),
    ("usable_cpus / 2", 13, "'/' is not supported"),
    ("2 ** 3", 3, "'**' is not supported"),
    ("usable_cpus * 0.5", 16, "decimal point"),
    ("(1 + 2", 7, "expected ')'"),
    ("1 +", 4, "ends too early"),
    ("1 2", 3, "unexpected '2'"),
    ("min(1)", 1, "at least two arguments"),
    ("max 1", 1, "needs arguments in parentheses"),
    ("4 // (numa_nodes - 2)", 3, "division by zero"),
    ("__import__('os')", 12, "unexpected character"),
    ("a.b", 2, "unexpected character '.'"),
    ("1234567", 1, "too large"),
    (")", 1, "unexpected ')'"),
])
def test_faults_name_their_column(text, column, words):
    with pytest.raises(ExprError) as info:
        evaluate(text, FACTS)
    assert words in info.value.message
    assert info.value.column == column


def test_unknown_name_suggests_the_close_one():
    with pytest.raises(ExprError) as info:
        evaluate("usable_cpu", FACTS)
    assert "did you mean 'usable_cpus'" in info.value.fix


def test_length_and_depth_are_bounded():
    with pytest.raises(ExprError, match="limit is 200"):
        evaluate("1+" * 150 + "1", FACTS)
    with pytest.raises(ExprError, match="nested more than 16"):
        evaluate("(" * 20 + "1" + ")" * 20, FACTS)
    with pytest.raises(ExprError, match="nested more than 16"):
        evaluate("-" * 40 + "1", FACTS)
    with pytest.raises(ExprError, match="more than 100 tokens"):
        evaluate("1+" * 60 + "1", {})  # 121 tokens in 121 characters
    assert evaluate("(" * 16 + "1" + ")" * 16, FACTS).value == 1


def test_function_names_are_not_facts():
    with pytest.raises(ExprError, match="needs arguments"):
        evaluate("min", {"min": 3})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_gives_a_value_or_an_expr_error(text):
    try:
        res = evaluate(text, FACTS)
    except ExprError as exc:
        assert 1 <= exc.column <= len(text) + 1 or exc.column == expr.MAX_LENGTH + 1
    else:
        assert isinstance(res.value, int)


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.one_of(st.integers(0, 99).map(str), st.sampled_from(sorted(FACTS))),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"min({t[0]}, {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"max({t[0]}, {t[1]})"),
    ), max_leaves=8))
def test_agrees_with_python_arithmetic_on_valid_expressions(text):
    # Reference: Python's own arithmetic on the same tree (only + - * min max, no division).
    reference = eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(FACTS))
    try:
        assert evaluate(text, FACTS).value == reference
    except ExprError as exc:
        assert "nested" in exc.message or "tokens" in exc.message or "long" in exc.message


def test_check_needs_no_facts_and_refuses_only_what_fails_everywhere():
    names = ("usable_cpus", "physical_cores", "numa_nodes")
    expr.check("usable_cpus // (physical_cores - 1)", names)  # zero only where physical_cores is 1
    expr.check("usable_cpus // (numa_nodes - numa_nodes + 1)", names)
    with pytest.raises(ExprError, match="division by zero") as info:
        expr.check("usable_cpus // (3 - 3)", names)  # zero on every machine
    assert info.value.column == 13
    with pytest.raises(ExprError, match="unknown name 'cores'") as info:
        expr.check("usable_cpus // cores", names)
    assert info.value.column == 16


def test_division_by_a_fact_that_is_zero_here_fails_with_its_column():
    assert evaluate("usable_cpus // (physical_cores - 1)", {"usable_cpus": 8, "physical_cores": 4}).value == 2
    with pytest.raises(ExprError, match="division by zero") as info:
        evaluate("usable_cpus // (physical_cores - 1)", {"usable_cpus": 1, "physical_cores": 1})
    assert info.value.column == 13
    assert expr.substitute("usable_cpus // (physical_cores - 1)", {"usable_cpus": 1, "physical_cores": 1}) \
        == "1 // (1 - 1)"


fact_values = st.fixed_dictionaries({k: st.integers(1, 64) for k in FACTS})


@st.composite
def _valid_somewhere(draw):
    """An expression over + - * // min max that some facts make valid (divisors may be zero elsewhere)."""
    leaf = st.one_of(st.integers(0, 9).map(str), st.sampled_from(sorted(FACTS)))
    tree = draw(st.recursive(leaf, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "//"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"min({t[0]}, {t[1]})"),
        st.tuples(inner, inner).map(lambda t: f"max({t[0]}, {t[1]})"),
    ), max_leaves=8))
    return tree


def _python(text: str, facts: dict[str, int]) -> int | None:
    try:
        return eval(text, {"__builtins__": {}, "min": min, "max": max}, dict(facts))  # test oracle
    except ZeroDivisionError:
        return None


@settings(max_examples=300, deadline=None)
@given(_valid_somewhere(), st.lists(fact_values, min_size=1, max_size=4))
def test_check_accepts_every_expression_that_some_machine_can_evaluate(text, machines):
    try:
        expr.check(text, FACTS)
    except ExprError as exc:
        if "nested" in exc.message or "tokens" in exc.message or "long" in exc.message:
            return
        # Refused without facts: then it is a division by zero on every one of these machines too.
        assert exc.message == "division by zero", exc.message
        assert all(_python(text, facts) is None for facts in machines), text
        return
    for facts in machines:
        reference = _python(text, facts)
        if reference is None:
            with pytest.raises(ExprError, match="division by zero"):
                evaluate(text, facts)
        else:
            assert evaluate(text, facts).value == reference
