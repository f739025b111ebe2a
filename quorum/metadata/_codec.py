"""A tiny compiler from Kafka message schemas to fast Python encoders and decoders.

Kafka generates one Java class per message schema (`generator/` in apache/kafka).
We do the same at import time: each `Schema` (a list of `Field`s mirroring the JSON
schema's fields, versions, nullability, tags and defaults) is turned into Python
source, one straight-line encoder and decoder per (schema, version), and compiled
with `exec`. That keeps a single description of every record (no hand-written
encode/decode pairs that can drift apart) and is several times faster than
interpreting the field list per record, which matters when a snapshot holds a
million PartitionRecords.

Wire format (Kafka's "flexible" versions, KIP-482); every metadata record is flexible:

* int8/int16/int32/int64/uint16: big-endian fixed width; bool: one byte (0/1).
* uuid: 16 bytes (most significant half first).
* string: compact string, uvarint(len(utf8) + 1) then the bytes; 0 means null.
  Kafka caps a string at 32767 bytes; so do we.
* arrays: compact array, uvarint(count + 1) then the elements; 0 means null.
* a struct (the message itself, or an array element) ends with a tagged-field
  section: uvarint(count) then, in ascending tag order, uvarint(tag),
  uvarint(size), value. A tagged field is written only when it differs from its
  default. Unknown tags are skipped when reading.

Generated decoders take `(data: bytes, p: int, end: int)` and return `(obj, p)`;
on malformed input they raise `RecordDecodeError`, `IndexError` or
`struct.error` (the caller maps the last two to `RecordDecodeError`). Generated
encoders take `(obj, out: list[bytes])` and append the encoding to `out`; on a
value the schema cannot hold they raise `ValueError`, `struct.error`,
`AttributeError` or `TypeError` (the caller maps them to `ValueError`).

The generated source of any (schema, version) is kept in `CompiledSchema.source`
for inspection.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any

from quorum.frozen_init import fast_constructor, slot_setter
from quorum.metadata.errors import RecordDecodeError
from quorum.raft.control_records import uvarint_bytes

__all__ = [
    "REQUIRED",
    "CompiledSchema",
    "Field",
    "Schema",
    "compile_schema",
    "fast_constructor",
    "read_uvarint",
    "uuid_from_bytes",
    "uvarint_bytes",
]

# Kafka's limit on a string's UTF-8 length.
MAX_STRING_BYTES = 0x7FFF

FIXED_FORMATS: dict[str, str] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "bool": "B",
    "uuid": "16s",
}
KINDS = frozenset(FIXED_FORMATS) | {"string", "[]int32", "[]uuid", "[]struct"}


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Field:
    """One schema field.

    `attr` is the Python attribute, `json` Kafka's camelCase field name (used in
    JSON dumps), `kind` one of KINDS. The field exists from version `since` on
    ("versions": "N+"); `nullable` and `tag` apply to every version the field
    exists in (true of all metadata schemas). `default` is Kafka's default: the
    value of an absent field, and the value for which a tagged field is not written.
    """

    attr: str
    json: str
    kind: str
    since: int = 0
    nullable: bool = False
    tag: int | None = None
    default: Any = REQUIRED
    struct: Schema | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown field kind {self.kind!r}")
        if (self.kind == "[]struct") != (self.struct is not None):
            raise ValueError(f"{self.attr}: struct arrays need a struct schema (and only they)")
        if (self.since > 0 or self.tag is not None) and self.default is REQUIRED:
            raise ValueError(f"{self.attr}: versioned or tagged fields need a default")


@dataclass(frozen=True)
class Schema:
    """A message or struct schema: the class it builds and its fields in wire order."""

    name: str
    cls: type
    fields: tuple[Field, ...]
    versions: range = field(default_factory=lambda: range(1))


DecodeFn = Callable[[bytes, int, int], tuple[Any, int]]
EncodeFn = Callable[[Any, list[bytes]], None]


@dataclass(frozen=True)
class CompiledSchema:
    schema: Schema
    decoders: dict[int, DecodeFn]
    encoders: dict[int, EncodeFn]
    source: dict[int, str]


# --------------------------------------------------------------------------- runtime helpers


_UV_LIMIT = 1 << 14
_UV: list[bytes] = [uvarint_bytes(n) for n in range(_UV_LIMIT)]


def _uvb(value: int) -> bytes:
    return _UV[value] if 0 <= value < _UV_LIMIT else uvarint_bytes(value)


def read_uvarint(data: bytes, p: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint) at `p`."""
    result = 0
    shift = 0
    for _ in range(5):
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
    raise RecordDecodeError("unsigned varint longer than 5 bytes")


# uuid.UUID(bytes=...) costs about a microsecond; topic ids repeat across all the
# partitions of a topic, so decoded UUIDs are shared through a bounded cache.
_UUID_CACHE: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_LIMIT = 1 << 16


def _new_uuid(raw: bytes) -> uuid.UUID:
    if len(_UUID_CACHE) >= _UUID_CACHE_LIMIT:
        _UUID_CACHE.clear()
    value = _UUID_CACHE[raw] = uuid.UUID(bytes=raw)
    return value


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """The UUID of 16 big-endian bytes (shared instances for repeated ids)."""
    return _UUID_CACHE.get(raw) or _new_uuid(raw)


_A32_LIMIT = 64
_A32: list[struct.Struct] = [struct.Struct(f">{n}i") for n in range(_A32_LIMIT)]


def _a32(n: int) -> struct.Struct:
    return struct.Struct(f">{n}i")


# --------------------------------------------------------------------------- code generation


class _Emitter:
    def __init__(self, ns: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.ns = ns
        self._n = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def const(self, value: Any, prefix: str = "_k") -> str:
        """A namespace name bound to `value` (for structs, defaults, messages)."""
        for name, existing in self.ns.items():
            if name.startswith(prefix) and existing is value:
                return name
        # Decoder and encoder share a namespace: never reuse a taken name.
        name = ""
        while not name or name in self.ns:
            self._n += 1
            name = f"{prefix}{self._n}"
        self.ns[name] = value
        return name

    def fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


def _present(fields: tuple[Field, ...], version: int) -> list[Field]:
    return [f for f in fields if f.since <= version]


def _default_literal(em: _Emitter, value: Any) -> str:
    if value is None or isinstance(value, (bool, int)) or value == ():
        return repr(value)
    return em.const(value, "_dflt")


def _nondefault_test(em: _Emitter, expr: str, f: Field) -> str:
    """A Python test that is true when `expr` differs from the field's default."""
    if f.default is None:
        return f"{expr} is not None"
    if f.default == () and f.kind.startswith("[]"):
        return f"{expr}"
    return f"{expr} != {_default_literal(em, f.default)}"


class _DecoderGen:
    def __init__(self, em: _Emitter, where: str) -> None:
        self.em = em
        self.where = where  # schema name, for error messages

    def err(self, message: str) -> str:
        return f"raise _E({self.em.const(f'{self.where}: {message}', '_msg')})"

    def uvarint(self, var: str) -> None:
        em = self.em
        em.line(f"{var} = data[p]")
        em.line(f"if {var} < 128:")
        em.line("    p += 1")
        em.line("else:")
        em.line(f"    {var}, p = _uv(data, p)")

    def fixed_group(self, group: list[tuple[Field, str]]) -> None:
        em = self.em
        fmt = ">" + "".join(FIXED_FORMATS[f.kind] for f, _ in group)
        st = struct.Struct(fmt)
        name = em.const(st, "_S")
        targets = ", ".join(var for _, var in group)
        if len(group) == 1:
            em.line(f"{targets} = {name}.unpack_from(data, p)[0]")
        else:
            em.line(f"{targets} = {name}.unpack_from(data, p)")
        em.line(f"p += {st.size}")
        for f, var in group:
            if f.kind == "uuid":
                em.line(f"{var} = _uc({var}) or _mkuuid({var})")
            elif f.kind == "bool":
                em.line(f"{var} = {var} != 0")

    def variable(self, f: Field, var: str, limit: str) -> None:
        em = self.em
        n = em.fresh("n")
        self.uvarint(n)
        em.line(f"if {n} == 0:")
        if f.nullable:
            em.line(f"    {var} = None")
        else:
            em.line("    " + self.err(f"non-nullable field {f.json} is null"))
        em.line("else:")
        em.depth += 1
        em.line(f"{n} -= 1")
        e = em.fresh("e")
        if f.kind == "string":
            em.line(f"{e} = p + {n}")
            em.line(f"if {n} > {MAX_STRING_BYTES} or {e} > {limit}:")
            em.line("    " + self.err(f"bad length of string {f.json}"))
            em.line(f"{var} = data[p:{e}].decode()")
            em.line(f"p = {e}")
        elif f.kind == "[]int32":
            em.line(f"{e} = p + 4 * {n}")
            em.line(f"if {e} > {limit}:")
            em.line("    " + self.err(f"array {f.json} longer than the record"))
            em.line(f"{var} = (_A32[{n}] if {n} < {_A32_LIMIT} else _a32({n})).unpack_from(data, p)")
            em.line(f"p = {e}")
        elif f.kind == "[]uuid":
            em.line(f"{e} = p + 16 * {n}")
            em.line(f"if {e} > {limit}:")
            em.line("    " + self.err(f"array {f.json} longer than the record"))
            em.line(f"{var} = tuple([_uc(data[i:i + 16]) or _mkuuid(data[i:i + 16]) for i in range(p, {e}, 16)])")
            em.line(f"p = {e}")
        else:  # []struct
            assert f.struct is not None
            sub = f"_sdec_{f.attr}"
            items = em.fresh("items")
            item = em.fresh("item")
            # Every element takes at least one byte (its tagged-field count).
            em.line(f"if {n} > {limit} - p:")
            em.line("    " + self.err(f"array {f.json} longer than the record"))
            em.line(f"{items} = []")
            em.line(f"for _ in range({n}):")
            em.line(f"    {item}, p = {sub}(data, p, {limit})")
            em.line(f"    {items}.append({item})")
            em.line(f"{var} = tuple({items})")
        em.depth -= 1

    def fields(self, fields: list[Field], names: dict[str, str], limit: str) -> None:
        group: list[tuple[Field, str]] = []
        for f in fields:
            if f.kind in FIXED_FORMATS:
                group.append((f, names[f.attr]))
                continue
            if group:
                self.fixed_group(group)
                group = []
            self.variable(f, names[f.attr], limit)
        if group:
            self.fixed_group(group)

    def tagged_section(self, tagged: list[Field], names: dict[str, str], limit: str) -> None:
        em = self.em
        nt = em.fresh("nt")
        self.uvarint(nt)
        em.line(f"if {nt}:")
        em.depth += 1
        # Each tagged field takes at least two bytes (tag, size).
        em.line(f"if {nt} > {limit} - p:")
        em.line("    " + self.err("bad tagged field count"))
        em.line(f"for _ in range({nt}):")
        em.depth += 1
        self.uvarint("tag")
        self.uvarint("size")
        em.line("t_end = p + size")
        em.line(f"if t_end > {limit}:")
        em.line("    " + self.err("tagged field runs past the record"))
        keyword = "if"
        for f in tagged:
            em.line(f"{keyword} tag == {f.tag}:")
            em.depth += 1
            self.fields([f], names, "t_end")
            em.depth -= 1
            keyword = "elif"
        if tagged:
            em.line("else:")
            em.line("    p = t_end")
        else:
            em.line("p = t_end")
        em.line("if p != t_end:")
        em.line("    " + self.err("tagged field size mismatch"))
        em.depth -= 2


def _gen_decoder(schema: Schema, version: int, ns: dict[str, Any]) -> str:
    em = _Emitter(ns)
    gen = _DecoderGen(em, f"{schema.name} v{version}")
    present = _present(schema.fields, version)
    names = {f.attr: f"f_{f.attr}" for f in schema.fields}
    em.line("def decode(data, p, end):")
    em.depth += 1
    tagged = sorted((f for f in present if f.tag is not None), key=lambda f: f.tag or 0)
    for f in tagged:
        em.line(f"{names[f.attr]} = {_default_literal(em, f.default)}")
    gen.fields([f for f in present if f.tag is None], names, "end")
    gen.tagged_section(tagged, names, "end")
    by_attr = {f.attr: f for f in schema.fields}
    args: list[tuple[str, str]] = []
    for dc_field in dataclass_fields(schema.cls):
        spec = by_attr.get(dc_field.name)
        if spec is None:
            raise ValueError(f"{schema.name}: class field {dc_field.name} has no schema field")
        args.append((spec.attr, names[spec.attr] if spec.since <= version else _default_literal(em, spec.default)))
    if len(args) != len(schema.fields):
        raise ValueError(f"{schema.name}: schema fields do not match the class fields")
    # Build the (frozen, slotted) object through its slot descriptors: about twice
    # as fast as the dataclass __init__, which goes through object.__setattr__.
    em.line("obj = _new(_cls)")
    for attr, value in args:
        em.line(f"{_slot_setter(em, schema.cls, attr)}(obj, {value})")
    em.line("return obj, p")
    return em.source()


def _slot_setter(em: _Emitter, cls: type, attr: str) -> str:
    name = f"_set_{attr}"
    em.ns[name] = slot_setter(cls, attr)
    return name


class _EncoderGen:
    def __init__(self, em: _Emitter, where: str) -> None:
        self.em = em
        self.where = where

    def fixed_group(self, group: list[Field], out: str) -> None:
        em = self.em
        fmt = ">" + "".join(FIXED_FORMATS[f.kind] for f in group)
        name = em.const(struct.Struct(fmt), "_S")
        exprs = []
        for f in group:
            if f.kind == "uuid":
                exprs.append(f"r.{f.attr}.bytes")
            elif f.kind == "bool":
                exprs.append(f"(1 if r.{f.attr} else 0)")
            else:
                exprs.append(f"r.{f.attr}")
        em.line(f"{out}.append({name}.pack({', '.join(exprs)}))")

    def value(self, f: Field, x: str, out: str) -> None:
        """Encode the value in local `x` of a (possibly tagged) field into list `out`."""
        em = self.em
        if f.kind in FIXED_FORMATS:
            name = em.const(struct.Struct(">" + FIXED_FORMATS[f.kind]), "_S")
            if f.kind == "uuid":
                em.line(f"{out}.append({x}.bytes)")
            elif f.kind == "bool":
                em.line(f"{out}.append({name}.pack(1 if {x} else 0))")
            else:
                em.line(f"{out}.append({name}.pack({x}))")
            return
        em.line(f"if {x} is None:")
        if f.nullable:
            em.line(f"    {out}.append(b'\\x00')")
        else:
            msg = em.const(f"{self.where}: non-nullable field {f.attr} is None", "_msg")
            em.line(f"    raise ValueError({msg})")
        em.line("else:")
        em.depth += 1
        if f.kind == "string":
            b = em.fresh("b")
            msg = em.const(f"{self.where}: string {f.attr} longer than {MAX_STRING_BYTES} bytes", "_msg")
            em.line(f"{b} = {x}.encode()")
            em.line(f"if len({b}) > {MAX_STRING_BYTES}:")
            em.line(f"    raise ValueError({msg})")
            em.line(f"{out}.append(_uvb(len({b}) + 1))")
            em.line(f"{out}.append({b})")
        elif f.kind == "[]int32":
            n = em.fresh("n")
            em.line(f"{n} = len({x})")
            em.line(f"{out}.append(_uvb({n} + 1))")
            em.line(f"{out}.append((_A32[{n}] if {n} < {_A32_LIMIT} else _a32({n})).pack(*{x}))")
        elif f.kind == "[]uuid":
            em.line(f"{out}.append(_uvb(len({x}) + 1))")
            em.line(f"{out}.append(b''.join([u.bytes for u in {x}]))")
        else:  # []struct
            assert f.struct is not None
            item = em.fresh("item")
            em.line(f"{out}.append(_uvb(len({x}) + 1))")
            em.line(f"for {item} in {x}:")
            em.line(f"    _senc_{f.attr}({item}, {out})")
        em.depth -= 1


def _gen_encoder(schema: Schema, version: int, ns: dict[str, Any]) -> str:
    em = _Emitter(ns)
    gen = _EncoderGen(em, f"{schema.name} v{version}")
    em.line("def encode(r, out):")
    em.depth += 1
    # Fields this version cannot hold must have their default (Kafka raises
    # UnsupportedVersionException in the same case).
    for f in schema.fields:
        if f.since > version:
            msg = em.const(f"{schema.name} v{version} cannot hold {f.attr} (needs v{f.since}+)", "_msg")
            em.line(f"if {_nondefault_test(em, 'r.' + f.attr, f)}:")
            em.line(f"    raise ValueError({msg})")
    present = _present(schema.fields, version)
    group: list[Field] = []
    for f in present:
        if f.tag is not None:
            continue
        if f.kind in FIXED_FORMATS:
            group.append(f)
            continue
        if group:
            gen.fixed_group(group, "out")
            group = []
        em.line(f"x = r.{f.attr}")
        gen.value(f, "x", "out")
    if group:
        gen.fixed_group(group, "out")
    tagged = sorted((f for f in present if f.tag is not None), key=lambda f: f.tag or 0)
    if not tagged:
        em.line("out.append(b'\\x00')")
        return em.source()
    em.line("nt = 0")
    em.line("tags = []")
    for f in tagged:
        em.line(f"x = r.{f.attr}")
        em.line(f"if {_nondefault_test(em, 'x', f)}:")
        em.depth += 1
        em.line("t = []")
        gen.value(f, "x", "t")
        em.line("b = b''.join(t)")
        em.line(f"tags.append({_uvb(f.tag or 0)!r})")
        em.line("tags.append(_uvb(len(b)))")
        em.line("tags.append(b)")
        em.line("nt += 1")
        em.depth -= 1
    em.line("out.append(_uvb(nt))")
    em.line("out.extend(tags)")
    return em.source()


def _base_namespace() -> dict[str, Any]:
    return {
        "_E": RecordDecodeError,
        "_uv": read_uvarint,
        "_uvb": _uvb,
        "_uc": _UUID_CACHE.get,
        "_mkuuid": _new_uuid,
        "_A32": _A32,
        "_a32": _a32,
    }


def compile_schema(schema: Schema, versions: range | None = None) -> CompiledSchema:
    """Compile encoders and decoders for `versions` (default: all) of `schema`.

    A nested struct is compiled at the version of the message that holds it (as
    in Kafka, a struct's fields are versioned by the enclosing message's version).
    """
    decoders: dict[int, DecodeFn] = {}
    encoders: dict[int, EncodeFn] = {}
    sources: dict[int, str] = {}
    for version in schema.versions if versions is None else versions:
        ns = _base_namespace()
        ns["_cls"] = schema.cls
        # `cls.__new__`: `object.__new__` for a Python class; a class compiled by mypyc has its
        # own (object.__new__ refuses it as "not safe").
        ns["_new"] = schema.cls.__new__
        for f in schema.fields:
            if f.struct is not None:
                sub = compile_schema(f.struct, range(version, version + 1))
                ns[f"_sdec_{f.attr}"] = sub.decoders[version]
                ns[f"_senc_{f.attr}"] = sub.encoders[version]
        dsrc = _gen_decoder(schema, version, ns)
        esrc = _gen_encoder(schema, version, ns)
        source = dsrc + "\n\n" + esrc
        code = compile(source, f"<metadata codec {schema.name} v{version}>", "exec")
        exec(code, ns)  # noqa: S102 - source generated above from our own schemas
        decoders[version] = ns["decode"]
        encoders[version] = ns["encode"]
        sources[version] = source
    return CompiledSchema(schema, decoders, encoders, sources)
