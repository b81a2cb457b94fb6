//===- Diagnostics.cpp - the compiler's diagnostics in the C API ----------===//
//
// kvattn_cpu_program_num_diagnostics / kvattn_cpu_program_diagnostic: the
// warnings and remarks CpuProgram::compile collected (the GPU's travel in the
// launch manifest, lib/Target/Ptx.cpp).
//
//===----------------------------------------------------------------------===//

#include "Diagnostics.h"

#include "kvattn/Support/CompilerDiagnostic.h"

#include <cstdlib>
#include <cstring>
#include <string>

using mlir::kvattn::CompilerDiagnostic;

extern "C" {

size_t kvattn_cpu_program_num_diagnostics(const kvattn_cpu_program *program) {
  return program ? kvattn::capi::cpuProgram(*program).diagnostics().size() : 0;
}

int kvattn_cpu_program_diagnostic(const kvattn_cpu_program *program,
                                  size_t index, kvattn_diagnostic *diagnostic,
                                  char **error) {
  auto fail = [&](const std::string &message) {
    if (error) {
      const std::string text = "kvattn_cpu_program_diagnostic: " + message;
      *error = static_cast<char *>(std::malloc(text.size() + 1));
      std::memcpy(*error, text.c_str(), text.size() + 1);
    }
    return 1;
  };
  if (!program || !diagnostic)
    return fail(std::string("null ") + (program ? "diagnostic" : "program"));
  const auto &all = kvattn::capi::cpuProgram(*program).diagnostics();
  if (index >= all.size())
    return fail("diagnostic " + std::to_string(index) +
                " is out of range (the program has " +
                std::to_string(all.size()) + ")");
  const CompilerDiagnostic &d = all[index];
  diagnostic->severity = static_cast<kvattn_diagnostic_severity>(d.severity);
  diagnostic->location = d.location.c_str();
  diagnostic->message = d.message.c_str();
  return 0;
}

} // extern "C"
