#!/usr/bin/env python3
"""Apply one mutant definition to a copy of one source file.

usage: apply.py MUTANT_FILE REPO_ROOT OUT_FILE
prints the repository-relative path of the mutated file.
       apply.py --check REPO_ROOT MUTANT_FILE...
checks that each applies (the first that does not fails, exit 2).

A mutant file is:
    # comment lines
    file: path/inside/repo.go
    suite: cluster        (optional: the suite that must kill it is the
                           tests/ module's, not the runtime module's)
    @@@ old
    exact text (must occur exactly once in the file)
    @@@ new
    replacement text
    @@@ end
(old/new/end blocks may repeat). If an old text does not occur exactly once,
or the result equals the original, the mutant fails loudly (exit 2) so it can
never silently become a no-op.
"""
import sys


def die(msg):
    sys.stderr.write("mutant definition error: %s\n" % msg)
    sys.exit(2)


def parse(path):
    target, pairs = None, []
    mode, old, new = None, [], []
    with open(path) as f:
        for line in f.read().split("\n"):
            if line == "@@@ old":
                mode, old, new = "old", [], []
            elif line == "@@@ new":
                if mode != "old":
                    die("%s: '@@@ new' without '@@@ old'" % path)
                mode = "new"
            elif line == "@@@ end":
                if mode != "new":
                    die("%s: '@@@ end' without '@@@ new'" % path)
                pairs.append(("\n".join(old), "\n".join(new)))
                mode = None
            elif mode == "old":
                old.append(line)
            elif mode == "new":
                new.append(line)
            elif line.startswith("file:"):
                target = line[len("file:"):].strip()
            elif line.startswith("suite:"):
                continue  # read by mutants.sh
            elif line.strip() == "" or line.startswith("#"):
                continue
            else:
                die("%s: stray line %r" % (path, line))
    if mode is not None:
        die("%s: unterminated block" % path)
    if not target or not pairs:
        die("%s: needs a 'file:' line and at least one old/new block" % path)
    return target, pairs


def mutate(mutant, root):
    """The mutated text of the mutant's file, and the file's path."""
    target, pairs = parse(mutant)
    with open("%s/%s" % (root, target)) as f:
        src = f.read()
    orig = src
    for i, (old, new) in enumerate(pairs):
        n = src.count(old)
        if n != 1:
            die("%s: block %d: pattern found %d times in %s (want exactly 1):\n%s"
                % (mutant, i + 1, n, target, old))
        src = src.replace(old, new, 1)
    if src == orig:
        die("%s: mutant leaves %s unchanged" % (mutant, target))
    return target, src


def main():
    if sys.argv[1:2] == ["--check"]:
        # --check ROOT MUTANT...: each applies; nothing is written.
        root = sys.argv[2]
        for mutant in sys.argv[3:]:
            mutate(mutant, root)
        print("mutants: all %d apply" % len(sys.argv[3:]))
        return
    mutant, root, out = sys.argv[1:4]
    target, src = mutate(mutant, root)
    with open(out, "w") as f:
        f.write(src)
    print(target)


if __name__ == "__main__":
    main()
