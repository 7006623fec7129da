"""JSON Schema validation whose cost a client cannot make unbounded (docs/design/025-guardrails.md).

A request's `response_format` schema is the client's, and validating the pool's answer with it runs on
the event loop. jsonschema, as shipped, lets that schema cost anything:
- `pattern`, `patternProperties` (and the additional/unevaluated properties that consult them) run
  Python's backtracking `re`: `^(a+)+$` against 25 a's and a `!` took 9 s, the loop frozen.
- in-place applicators (`anyOf` over `$ref`s that each `anyOf` again) multiply: `d` levels evaluate
  the instance 2**d times, in linear schema size.
- `uniqueItems` on unhashable items compares every pair.

Here every regular expression the schema holds is compiled once by RE2 (linear-time matching, no
backreferences or lookaround; a pattern RE2 refuses is the client's 400), those four keywords match
with it, `uniqueItems` hashes a canonical form, and every keyword evaluation first checks a deadline:
past it, the validation stops with `SchemaTooCostly`, the check's caller answers a 400 in the API's
shape. The loop waits at most the deadline plus one keyword's (now linear) work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import orjson
import re2
from jsonschema import validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

from gateway.errors import InvalidRequestError

__all__ = ["MAX_PATTERN_CHARS", "MAX_PATTERNS", "SchemaTooCostly", "bounded_validator"]

MAX_PATTERNS = 256  # distinct regular expressions one schema may hold
MAX_PATTERN_CHARS = 1_000  # per pattern
_RE2_MAX_MEM = 8 << 20  # bytes RE2 may use for one compiled pattern (its default is 8 MiB too)
_PARAM = "response_format.json_schema.schema"

Keyword = Callable[[Any, Any, Any, Any], Iterator[ValidationError] | None]


class SchemaTooCostly(InvalidRequestError):
    """Validating an answer against the request's schema ran past the gateway's deadline."""

    default_code = "schema_too_complex"


class _Budget:
    __slots__ = ("deadline", "patterns")

    def __init__(self, deadline: float, patterns: Mapping[str, Any]) -> None:
        self.deadline = deadline
        self.patterns = patterns


# The running validation's deadline and compiled patterns. A context variable, not a validator
# attribute: jsonschema makes a new validator object for every subschema it descends into.
_BUDGET: ContextVar[_Budget | None] = ContextVar("schema_budget", default=None)


def _budget() -> _Budget:
    budget = _BUDGET.get()
    if budget is None:  # a bounded validator used outside `BoundedValidator.is_valid`
        raise RuntimeError("bounded schema keywords run only inside BoundedValidator.is_valid")
    if time.perf_counter() > budget.deadline:
        raise SchemaTooCostly(
            "response_format.json_schema.schema is too costly to validate the answer against "
            "(the gateway's validation deadline passed); simplify the schema",
            param=_PARAM,
        )
    return budget


def _search(pattern: str, text: str) -> bool:
    return _budget().patterns[pattern].search(text) is not None


# -- the keywords that match regular expressions, with RE2 ------------------------------------------


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional(instance: dict[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError(f"additional properties are not allowed ({', '.join(map(repr, extras))})")


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    """The properties `schema` evaluates in place (jsonschema's `find_evaluated_property_keys_by_schema`,
    Draft 2019-09 and later, with RE2 for `patternProperties`)."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for ref_kw in ("$ref", "$dynamicRef"):
        ref = schema.get(ref_kw)
        if isinstance(ref, str):
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated_keys(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        sub = schema.get(keyword)
        if sub is not None:
            keys |= {k for k, v in instance.items() if validator.evolve(schema=sub).is_valid(v)}
    for pattern in schema.get("patternProperties", {}):
        keys |= {k for k in instance if _search(pattern, k)}
    for prop, sub in schema.get("dependentSchemas", {}).items():
        if prop in instance:
            keys |= _evaluated_keys(validator, instance, sub)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(keyword, []):
            if validator.evolve(schema=sub).is_valid(instance):
                keys |= _evaluated_keys(validator, instance, sub)
    if "if" in schema:
        branch = "then" if validator.evolve(schema=schema["if"]).is_valid(instance) else "else"
        keys |= _evaluated_keys(validator, instance, schema["if"]) if branch == "then" else set()
        if branch in schema:
            keys |= _evaluated_keys(validator, instance, schema[branch])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    rest = [k for k in instance if k not in evaluated]
    for k in rest:
        if not validator.evolve(schema=unevaluated).is_valid(instance[k]):
            yield ValidationError(f"unevaluated property {k!r} is not allowed by unevaluatedProperties")


# -- uniqueItems, linear ---------------------------------------------------------------------------


def _canonical(value: Any) -> Any:
    """A hashable form under JSON Schema equality: 1 == 1.0, but true != 1; objects by their items."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    return ("other", orjson.dumps(value, default=str))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


_REPLACED: dict[str, Keyword] = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "uniqueItems": _unique_items,
}


def _metered(keyword: Keyword) -> Keyword:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError] | None:
        _budget()  # the deadline, checked before every keyword's evaluation
        return keyword(validator, value, instance, schema)

    return run


_CLASSES: dict[type[Validator], type[Validator]] = {}


def _bounded_class(base: type[Validator]) -> type[Validator]:
    """`base` (a draft's validator class) with the keywords above and a deadline before each one; made
    once per draft."""
    cls = _CLASSES.get(base)
    if cls is None:
        keywords = dict(base.VALIDATORS)
        for name in keywords.keys() & _REPLACED.keys():
            if name != "unevaluatedProperties" or "unevaluatedProperties" in base.VALIDATORS:
                keywords[name] = _REPLACED[name]
        metered = {name: _metered(fn) for name, fn in keywords.items()}
        cls = _CLASSES[base] = validators.extend(base, metered)  # type: ignore[no-untyped-call]
    return cls


# -- the patterns a schema holds -------------------------------------------------------------------


def _patterns(schema: Any) -> set[str]:
    """Every `pattern` value and `patternProperties` key in `schema` (bodies nest at most
    max_json_depth, so the recursion is bounded)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            p = node.get("pattern")
            if isinstance(p, str):
                found.add(p)
            pp = node.get("patternProperties")
            if isinstance(pp, dict):
                found.update(k for k in pp if isinstance(k, str))
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(schema)
    return found


def _compile(patterns: set[str]) -> dict[str, Any]:
    if len(patterns) > MAX_PATTERNS:
        raise InvalidRequestError(
            f"response_format.json_schema.schema holds {len(patterns)} regular expressions "
            f"(at most {MAX_PATTERNS})",
            param=_PARAM,
            code="schema_too_complex",
        )
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _RE2_MAX_MEM
    compiled = {}
    for p in patterns:
        if len(p) > MAX_PATTERN_CHARS:
            raise InvalidRequestError(
                f"response_format.json_schema.schema: a pattern of {len(p)} characters "
                f"(at most {MAX_PATTERN_CHARS})",
                param=_PARAM,
                code="schema_too_complex",
            )
        try:
            compiled[p] = re2.compile(p, options)
        except re2.error:
            raise InvalidRequestError(
                f"response_format.json_schema.schema: the pattern {p[:100]!r} is not supported: the "
                "gateway matches patterns with RE2 (no backreferences or lookaround)",
                param=_PARAM,
                code="unsupported_pattern",
            ) from None
    return compiled


class BoundedValidator:
    """A request schema's validator: `is_valid(instance)` within `deadline_s` or `SchemaTooCostly`."""

    __slots__ = ("_validator", "_patterns", "_deadline_s")

    def __init__(self, validator: Validator, patterns: dict[str, Any], deadline_s: float) -> None:
        self._validator = validator
        self._patterns = patterns
        self._deadline_s = deadline_s

    def is_valid(self, instance: Any) -> bool:
        token = _BUDGET.set(_Budget(time.perf_counter() + self._deadline_s, self._patterns))
        try:
            return bool(self._validator.is_valid(instance))
        except RecursionError:  # a schema that refers to itself in place: it can never finish
            raise SchemaTooCostly(
                "response_format.json_schema.schema refers to itself without descending into the "
                "value; it cannot be applied",
                param=_PARAM,
            ) from None
        finally:
            _BUDGET.reset(token)


def bounded_validator(schema: dict[str, Any], base: type[Validator], deadline_s: float) -> BoundedValidator:
    """A validator of `base`'s draft for `schema` (already checked against its meta-schema), with its
    patterns compiled by RE2 now: a pattern RE2 refuses is an `InvalidRequestError`."""
    patterns = _compile(_patterns(schema))
    return BoundedValidator(_bounded_class(base)(schema), patterns, deadline_s)
