"""Reading a file a person gives (a replay spec, a comparison config) with bounds, before anything validates it.

``yaml.safe_load`` runs no code, but it still reads whatever it is pointed at: ``/dev/zero`` without end, a
folder with a traceback, and a YAML *alias bomb* (ten lines of anchors, each nine aliases of the one before)
into a graph that every later walk — pydantic, the literal-secret check — expands to billions of values, or a
recursive alias into a cycle they never leave. Here a file must be a regular file of at most ``max_bytes`` of
UTF-8, and a YAML document is measured while it is composed, aliases expanded: at most :data:`MAX_DEPTH` levels
deep and :data:`MAX_VALUES` values, no alias to an enclosing node. Each refusal is a :class:`ValueError` naming
the file and the fix; the callers turn it into their own error (``SpecError``, the CLI's usage error). Pure.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

#: Levels of nesting a spec or config may have, aliases expanded (a replay spec has fewer than ten).
MAX_DEPTH = 64
#: Values (scalars, lists and mappings) a document may hold, aliases expanded.
MAX_VALUES = 200_000


def read_text_file(path: Path, label: str, expected: str, max_bytes: int) -> str:
    """The UTF-8 text of the regular file ``path``, read no further than ``max_bytes`` (+1 to know it is more).

    ``label`` names it in errors (``"--spec x.yaml"``), ``expected`` says what to give instead (``"the path of
    your ReplaySpec YAML"``). A folder, a device or a pipe is refused without being opened for reading.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ValueError(f"{label}: no such file. Fix: give {expected}") from None
    except OSError as err:
        raise ValueError(f"{label}: cannot be read ({err.strerror}). Fix: give {expected}") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{label}: is a folder, not a file. Fix: give {expected}")
    if not stat.S_ISREG(mode):
        raise ValueError(f"{label}: not a regular file (a device, pipe or socket). Fix: give {expected}")
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as err:
        raise ValueError(f"{label}: cannot be read ({err.strerror}). Fix: give {expected}") from None
    if len(data) > max_bytes:
        raise ValueError(f"{label}: larger than {max_bytes:,} bytes. Fix: give {expected} (a few KB)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(
            f"{label}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at line {line}, column {column}). "
            "Fix: save the file as UTF-8"
        ) from None


def load_yaml(text: str, label: str) -> Any:
    """One YAML document, measured while it is composed (see the module docstring); ``label`` names it in
    errors. A YAML syntax error is a :class:`ValueError` too, with its line."""
    loader = _BoundedLoader(text, label)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ValueError(f"{label}: not valid YAML ({' '.join(str(err).split())}). Fix: correct the YAML") from None
    except RecursionError:  # a deep flow collection in a construct step PyYAML does recursively
        raise ValueError(f"{label}: nested too deeply. Fix: at most {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that measures every node as it is composed: (values, depth) with aliases expanded."""

    def __init__(self, text: str, label: str) -> None:
        super().__init__(text)
        self._label = label
        self._depth = 0
        self._aliases = 0
        #: id(node) -> (values, depth) of the finished nodes (an alias points to one of them, or to an ancestor)
        self._measured: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """Compose the next node and measure it; an alias adds the measure of the node it names."""
        if self.check_event(AliasEvent):
            node = super().compose_node(parent, index)
            self._aliases += 1
            if id(node) not in self._measured:
                raise ValueError(
                    f"{self._label}: a recursive YAML alias (a node holds an alias of itself): no spec needs one. "
                    "Fix: write the value out"
                )
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ValueError(f"{self._label}: nested too deeply (more than {MAX_DEPTH} levels). Fix: flatten it")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._measure(node)
        return node

    def _measure(self, node: Node) -> None:
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        sizes = [self._measured[id(c)] for c in children]
        values = 1 + sum(s[0] for s in sizes)
        depth = 1 + max((s[1] for s in sizes), default=0)
        if depth > MAX_DEPTH:
            raise ValueError(
                f"{self._label}: nested too deeply once its aliases are expanded (more than {MAX_DEPTH} levels). "
                "Fix: use fewer nested aliases"
            )
        if values > MAX_VALUES and self._aliases:
            raise ValueError(
                f"{self._label}: its {self._aliases} YAML alias(es) expand to more than {MAX_VALUES:,} values (an "
                "alias bomb). Fix: write the values out, without aliases of aliases"
            )
        if values > MAX_VALUES:
            raise ValueError(f"{self._label}: more than {MAX_VALUES:,} values. Fix: a spec or config of a few KB")
        self._measured[id(node)] = (values, depth)
