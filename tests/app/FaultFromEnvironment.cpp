// Linked only into k3_with_test_hooks, the CLI the fault tests run: arms the engine's
// fault hook (k3/fault_injection.hpp) from K3_FAULT_INJECT before main. The shipped `k3`
// is built without this file, so no environment variable can make it fail on purpose.
#include "k3/fault_injection.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

namespace {

// A test hook that silently did nothing would let a test pass for the wrong reason, so
// a bad value stops the process.
bool armFromEnvironment() {
    const char* spec = std::getenv("K3_FAULT_INJECT");
    if (!spec || !*spec) return false;
    try {
        k3::FaultRule rule = k3::parseFaultRule(spec);
        std::fprintf(stderr, "k3: TEST HOOK: fault injection armed (K3_FAULT_INJECT): %s\n",
                     k3::describeFaultRule(rule).c_str());
        k3::armFault(std::move(rule));
        return true;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "k3: error: K3_FAULT_INJECT=\"%s\": %s\n", spec, e.what());
        std::_Exit(2);
    }
}

[[maybe_unused]] const bool gArmedFromEnvironment = armFromEnvironment();

} // namespace
