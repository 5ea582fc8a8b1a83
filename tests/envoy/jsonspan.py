"""Where each JSON value sits in a body's raw bytes.

The sidecar splices: what it keeps of a request reaches the upstream as the
client's own bytes. To check that, the runner needs the byte span of every
value (a top-level member's value, one message of an array), not only the
parsed value. `parse(raw)` returns a tree of `Node`s, each with its span in
`raw` and its decoded value; it accepts exactly what `json.loads` accepts (the
decoded values come from `json.loads` on each scalar's bytes) and raises
`ValueError` otherwise.
"""

import json

WS = b" \t\r\n"


class Node:
    """One JSON value: kind, [start, end) in the raw bytes, decoded value.

    An object keeps `members`, a list of `Member`; an array keeps `items`.
    """

    __slots__ = ("kind", "start", "end", "raw", "members", "items")

    def __init__(self, kind, start, end, raw):
        self.kind = kind
        self.start = start
        self.end = end
        self.raw = raw
        self.members = []
        self.items = []

    @property
    def bytes(self):
        return self.raw[self.start:self.end]

    @property
    def value(self):
        return json.loads(self.bytes)

    def member(self, key):
        """The value of the first member named `key`, or None."""
        for m in self.members:
            if m.key == key:
                return m.value
        return None

    def keys(self):
        return [m.key for m in self.members]


class Member:
    """One member of an object: its key, the key's start and its value."""

    __slots__ = ("key", "key_start", "value")

    def __init__(self, key, key_start, value):
        self.key = key
        self.key_start = key_start
        self.value = value


def parse(raw):
    """The tree of `raw` (bytes holding exactly one JSON value)."""
    raw = bytes(raw)
    node, pos = _value(raw, _skip(raw, 0))
    if _skip(raw, pos) != len(raw):
        raise ValueError(f"trailing bytes at {pos}")
    return node


def _skip(raw, pos):
    while pos < len(raw) and raw[pos] in WS:
        pos += 1
    return pos


def _expect(raw, pos, char):
    if pos >= len(raw) or raw[pos] != ord(char):
        raise ValueError(f"expected {char!r} at {pos}")
    return pos + 1


def _string_end(raw, pos):
    pos = _expect(raw, pos, '"')
    while pos < len(raw):
        c = raw[pos]
        if c == 0x5C:  # backslash: skip the escaped byte
            pos += 2
        elif c == 0x22:
            return pos + 1
        else:
            pos += 1
    raise ValueError("unterminated string")


def _value(raw, pos):
    if pos >= len(raw):
        raise ValueError("unexpected end")
    c = raw[pos]
    if c == ord("{"):
        node = Node("object", pos, None, raw)
        pos = _skip(raw, pos + 1)
        if pos < len(raw) and raw[pos] == ord("}"):
            node.end = pos + 1
            return node, node.end
        while True:
            key_start = pos
            key_end = _string_end(raw, pos)
            key = json.loads(raw[key_start:key_end])
            pos = _skip(raw, _expect(raw, _skip(raw, key_end), ":"))
            value, pos = _value(raw, pos)
            node.members.append(Member(key, key_start, value))
            pos = _skip(raw, pos)
            if pos < len(raw) and raw[pos] == ord(","):
                pos = _skip(raw, pos + 1)
                continue
            node.end = _expect(raw, pos, "}")
            return node, node.end
    if c == ord("["):
        node = Node("array", pos, None, raw)
        pos = _skip(raw, pos + 1)
        if pos < len(raw) and raw[pos] == ord("]"):
            node.end = pos + 1
            return node, node.end
        while True:
            item, pos = _value(raw, pos)
            node.items.append(item)
            pos = _skip(raw, pos)
            if pos < len(raw) and raw[pos] == ord(","):
                pos = _skip(raw, pos + 1)
                continue
            node.end = _expect(raw, pos, "]")
            return node, node.end
    if c == ord('"'):
        end = _string_end(raw, pos)
        node = Node("string", pos, end, raw)
    else:
        end = pos
        while end < len(raw) and raw[end] not in b" \t\r\n,]}":
            end += 1
        node = Node("scalar", pos, end, raw)
    node.value  # noqa: B018 - raises ValueError on a malformed scalar
    return node, end


def _cut(obj, i):
    """The byte range that removes member `i` of object `obj`: the member
    with exactly one comma beside it (the one before it, or after it when it
    is the first member), and nothing else. An addition the sidecar spliced
    into a client's object is so undone byte for byte wherever it went."""
    raw = obj.raw
    m = obj.members[i]
    if i > 0:
        comma = raw.index(b",", obj.members[i - 1].value.end, m.key_start)
        return comma, m.value.end
    if len(obj.members) > 1:
        comma = raw.index(b",", m.value.end, obj.members[1].key_start)
        return m.key_start, comma + 1
    return m.key_start, m.value.end


def _splice_out(raw, start, end, cuts):
    out = bytearray()
    pos = start
    for a, b in sorted(cuts):
        out += raw[pos:a]
        pos = b
    out += raw[pos:end]
    return bytes(out)


def without_member(obj, key):
    """The bytes of object `obj` with its first member `key` cut out (see
    `_cut`), or None when it has no such member."""
    for i, m in enumerate(obj.members):
        if m.key == key:
            return _splice_out(obj.raw, obj.start, obj.end, [_cut(obj, i)])
    return None


def strip_key_everywhere(node, key):
    """The bytes of `node` with every object member named `key`, at any
    depth, cut out (see `_cut`), and how many were cut."""
    cuts = []

    def walk(n):
        if n.kind == "object":
            for i, m in enumerate(n.members):
                if m.key == key:
                    cuts.append(_cut(n, i))
                else:
                    walk(m.value)
        elif n.kind == "array":
            for item in n.items:
                walk(item)

    walk(node)
    return _splice_out(node.raw, node.start, node.end, cuts), len(cuts)
