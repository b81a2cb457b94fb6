# -*- Python -*-
# The GoogleTest binaries, run through lit so one command runs every test.

import os

import lit.formats

config.name = "kvattn-unit"
config.suffixes = []
config.test_source_root = config.unit_test_dir
config.test_exec_root = config.unit_test_dir
config.test_format = lit.formats.GoogleTest(".", "Tests")
# compileToPtx's kernel cache: the main suite's directory, never the user's
# (KernelCacheTest points it at directories of its own).
config.environment["KVATTN_CACHE_DIR"] = os.path.join(
    config.kvattn_obj_root, "test", "kernel-cache")
