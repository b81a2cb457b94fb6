# -*- Python -*-
# The GoogleTest binaries, run through lit so one command runs every test.

import lit.formats

config.name = "kvattn-unit"
config.suffixes = []
config.test_source_root = config.unit_test_dir
config.test_exec_root = config.unit_test_dir
config.test_format = lit.formats.GoogleTest(".", "Tests")
