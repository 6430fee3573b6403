// k3: run Kimi K3 from a terminal. Exit codes (DESIGN.md): 0 ok, 1 load/forward
// failure or memory refusal, 2 usage error or unreadable config, 4 run invalid.
#include <CLI/CLI.hpp>

#include <k3/presets.hpp>
#include <k3/version.hpp>

#include <cstdio>
#include <iostream>

namespace {
constexpr int kExitUsage = 2;
}

int main(int argc, char** argv) {
    CLI::App app{"k3: run the 2.78-trillion-parameter Kimi K3 on one CPU by streaming its "
                 "weights from disk.",
                 "k3"};
    app.set_version_flag("--version", std::string("k3 (k3chat) ") + k3::kVersion);
    bool listPresets = false;
    app.add_flag("--list-presets", listPresets,
                 "Print the memory presets (trunk GB / expert-cache GB) and exit");
    app.footer("Exit codes: 0 ok, 1 load or forward failure or memory refusal, 2 usage error "
               "or unreadable config, 4 run invalid.");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e); // prints help/version, or the error and a hint
        return code == 0 ? 0 : kExitUsage;
    }

    if (listPresets) {
        std::fputs(k3::formatPresetTable().c_str(), stdout);
        return 0;
    }
    std::cout << app.help();
    return 0;
}
