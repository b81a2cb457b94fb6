// The index bitwidth of -kvattn-device-validation is 32 or 64, refused by
// name otherwise, and printed as a number (it printed as a character:
// issue 30 item 10).
// RUN: not kvattn-opt %s -kvattn-device-validation=index-bitwidth=65 2>&1 | FileCheck %s --check-prefix=W65
// RUN: not kvattn-opt %s -kvattn-device-validation=index-bitwidth=16 2>&1 | FileCheck %s --check-prefix=W16
// W65: error: kvattn-device-validation: index bitwidth 65 is not supported (32 or 64)
// W16: error: kvattn-device-validation: index bitwidth 16 is not supported (32 or 64)

module {
}
