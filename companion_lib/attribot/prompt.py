r"""A prompt with its context split into sources (sentences) grouped into units (paragraphs).

Ablating a set :math:`S` of sources deletes their tokens from the sequence (the official code rebuilds the
context text without them); the response tokens move left by the number of deleted tokens before them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContextPrompt"]


def _spans(value, name: str) -> tuple[tuple[int, int], ...]:
    try:
        spans = tuple((int(a), int(b)) for a, b in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of (start, end) pairs") from None
    return spans


@dataclass(frozen=True)
class ContextPrompt:
    r"""Token ids, source spans, group spans, response positions and the context's span.

    Attributes
    ----------
    ids:
        The whole sequence: prompt, context, question and response tokens.
    sources:
        Half-open token spans ``(start, end)`` of the sources :math:`c_1,\dots,c_n`, in order, inside
        ``context``, not overlapping.
    groups:
        Spans of the coarse units (paragraphs); each source lies in exactly one group. May be empty.
    response_positions:
        Positions of the response tokens :math:`r_t` whose log-probabilities are summed.
    context:
        The span ``(start, end)`` of the context; every response position lies after it.
    """

    ids: tuple[int, ...]
    sources: tuple[tuple[int, int], ...]
    groups: tuple[tuple[int, int], ...]
    response_positions: tuple[int, ...]
    context: tuple[int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(t) for t in self.ids))
        object.__setattr__(self, "sources", _spans(self.sources, "sources"))
        object.__setattr__(self, "groups", _spans(self.groups, "groups"))
        object.__setattr__(self, "response_positions", tuple(int(p) for p in self.response_positions))
        c0, c1 = (int(x) for x in self.context)
        object.__setattr__(self, "context", (c0, c1))
        if not 0 <= c0 <= c1 <= len(self.ids):
            raise ValueError(f"context {self.context} lies outside the sequence of length {len(self.ids)}")
        if not self.response_positions:
            raise ValueError("response_positions is empty: the response needs at least one token")
        for p in self.response_positions:
            if not c1 < p < len(self.ids):
                raise ValueError(f"response_positions must lie after the context and inside the sequence, got {p}")
        if not self.sources:
            raise ValueError("sources is empty")
        for name, spans in (("sources", self.sources), ("groups", self.groups)):
            for a, b in spans:
                if not c0 <= a < b <= c1:
                    raise ValueError(f"{name} span {(a, b)} lies outside the context {self.context}")
            for (a0, b0), (a1, b1) in zip(spans, spans[1:]):
                if a1 < b0:
                    raise ValueError(f"{name} spans {(a0, b0)} and {(a1, b1)} overlap or are out of order")
        if self.groups:
            for a, b in self.sources:
                if sum(g0 <= a and b <= g1 for g0, g1 in self.groups) != 1:
                    raise ValueError(f"source {(a, b)} must lie inside exactly one group")

    @property
    def n_sources(self) -> int:
        return len(self.sources)

    def group_members(self) -> list[list[int]]:
        """Source indices of each group."""
        return [[i for i, (a, b) in enumerate(self.sources) if g0 <= a and b <= g1] for g0, g1 in self.groups]

    def with_response(self, tokens) -> "ContextPrompt":
        """The same prompt with the response tokens replaced by ``tokens`` (e.g. a model's greedy answers)."""
        tokens = [int(t) for t in tokens]
        if len(tokens) != len(self.response_positions):
            raise ValueError(f"tokens must give one id per response position ({len(self.response_positions)}), "
                             f"got {len(tokens)}")
        ids = list(self.ids)
        for p, t in zip(self.response_positions, tokens):
            ids[p] = t
        return ContextPrompt(tuple(ids), self.sources, self.groups, self.response_positions, self.context)

    def ablate(self, spans) -> tuple[list[int], list[int]]:
        """Ids with the token ``spans`` deleted and the response positions in the shortened sequence."""
        spans = sorted(_spans(spans, "spans"))
        keep = [True] * len(self.ids)
        for a, b in spans:
            if not self.context[0] <= a < b <= self.context[1]:
                raise ValueError(f"span {(a, b)} lies outside the context {self.context}")
            for t in range(a, b):
                keep[t] = False
        shift, new_pos = [], 0
        for k in keep:
            shift.append(new_pos)
            new_pos += k
        ids = [t for t, k in zip(self.ids, keep) if k]
        return ids, [shift[p] for p in self.response_positions]

    def restrict(self, keep_sources) -> tuple["ContextPrompt", list[int]]:
        """The prompt whose context holds only ``keep_sources`` (groups left empty are removed whole).

        Returns the pruned prompt and, for each of its sources, the index of that source here.
        """
        keep = sorted({int(i) for i in keep_sources})
        if not keep or not 0 <= keep[0] <= keep[-1] < self.n_sources:
            raise ValueError(f"keep_sources must be non-empty indices in [0, {self.n_sources}), got {keep_sources}")
        kept = set(keep)
        removed = [s for i, s in enumerate(self.sources) if i not in kept]
        if self.groups:
            removed = []
            for g, members in zip(self.groups, self.group_members()):
                if not kept & set(members):
                    removed.append(g)
                else:
                    removed += [self.sources[i] for i in members if i not in kept]
        removed.sort()

        def moved(p: int) -> int:
            return p - sum(max(0, min(b, p) - a) for a, b in removed)

        ids, resp = self.ablate(removed)
        sources = tuple((moved(self.sources[i][0]), moved(self.sources[i][1])) for i in keep)
        groups = tuple((moved(a), moved(b)) for (a, b), m in zip(self.groups, self.group_members()) if kept & set(m))
        pruned = ContextPrompt(tuple(ids), sources, groups, tuple(resp), (moved(self.context[0]), moved(self.context[1])))
        return pruned, keep
