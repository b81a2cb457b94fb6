"""Checks the kernel cache's source list against ninja's dependency records.

usage: compiler_hash_sources.py SRC_ROOT OBJ_ROOT

Every kvattn file (under SRC_ROOT, or a public header exported into
OBJ_ROOT/include and mapped back to its source by OBJ_ROOT/public-headers.txt)
that an object of the dialect, the passes, KVAttnTarget or KVAttnSupport was
compiled from must be in OBJ_ROOT/lib/Target/compiler-sources.txt. Generated
files (TableGen's .inc, the hash header itself) derive from listed sources.
Exits 1 naming each file that is missing.
"""
import os
import subprocess
import sys

src_root, obj_root = (os.path.realpath(p) for p in sys.argv[1:3])
listed = {os.path.realpath(l.strip())
          for l in open(os.path.join(obj_root, "lib/Target/compiler-sources.txt"))
          if l.strip()}
exported = {}
for line in open(os.path.join(obj_root, "public-headers.txt")):
    if line.strip():
        name, source = line.split(" ", 1)
        exported[os.path.join(obj_root, "include", name)] = os.path.realpath(
            source.strip())

targets = ("obj.KVAttnDialect.dir", "obj.KVAttnPasses.dir",
           "obj.KVAttnTarget.dir", "KVAttnSupport.dir")
deps = subprocess.run(["ninja", "-C", obj_root, "-t", "deps"], check=True,
                      capture_output=True, text=True).stdout
objects, needed, current = 0, set(), False
for line in deps.splitlines():
    if line and not line[0].isspace():
        current = any(t in line for t in targets)
        objects += current
    elif current and line.strip():
        path = os.path.realpath(os.path.join(obj_root, line.strip()))
        if path in exported:
            needed.add(exported[path])
        elif path.startswith(src_root + os.sep) and not path.startswith(
                obj_root + os.sep):
            needed.add(path)
if objects == 0:
    sys.exit("no dependency records of the compiler libraries: build first")
for path in sorted(needed & listed):
    if path.endswith(("StatusWord.h", "DeviceValidation.cpp")):
        print("listed:", os.path.relpath(path, src_root))
missing = sorted(needed - listed)
for path in missing:
    print("not hashed:", os.path.relpath(path, src_root))
if missing:
    sys.exit(1)
print("every kvattn file the compiler objects depend on is hashed "
      f"({len(needed)} files)")
