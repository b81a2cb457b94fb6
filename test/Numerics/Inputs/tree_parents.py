#!/usr/bin/env python3
"""Prints tree_parents (comma-separated) for a ragged batch of draft-token
trees, one argument per sequence: DEPTH:BRANCHING is a full tree (one root,
DEPTH levels of BRANCHING children each, in breadth-first order, so every
parent comes before its children), 'decode' a plain decode row (a single
root), 'chain:N' a chain of N tokens (plain causal rows), 'roots:N' N roots
(each token sees only the cache and itself). With --lens it prints each
sequence's token count instead."""
import sys


def tree(spec):
    if spec == "decode":
        return [-1]
    kind, _, n = spec.partition(":")
    if kind == "chain":
        return [-1] + list(range(int(n) - 1))
    if kind == "roots":
        return [-1] * int(n)
    depth, branching = int(kind), int(n)
    parents, level = [-1], [0]
    for _ in range(depth):
        nxt = []
        for p in level:
            for _ in range(branching):
                parents.append(p)
                nxt.append(len(parents) - 1)
        level = nxt
    return parents


def main():
    args = sys.argv[1:]
    lens = "--lens" in args
    trees = [tree(s) for s in args if s != "--lens"]
    if lens:
        print(",".join(str(len(t)) for t in trees))
    else:
        print(",".join(str(p) for t in trees for p in t))


if __name__ == "__main__":
    main()
