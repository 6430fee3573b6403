// The inference library on its own: this program links libk3engine and nothing of
// libk3tools (no hub, remote client, server protocol, doctor or packer; no libcurl, no
// OpenSSL), opens the bundled demo and answers the reference's first prompt. It fails
// to link when inference code reaches into the tools, and fails when the answer is not
// the reference's greedy ids.
#include "k3/chat.hpp"
#include "k3/launch.hpp"
#include "k3/session.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

int main() {
    try {
        const std::string demo = K3_SOURCE_DIR "/resources/demo";
        std::ifstream in(demo + "/expected.json");
        const auto prompt = nlohmann::json::parse(in).at("prompts").at(0);
        k3::LaunchConfig config;
        config.modelDir = demo;
        k3::Session session = k3::Session::open(config);
        k3::GenerateOptions options;
        options.render.thinking = false;
        options.maxTokens = 64;
        const std::vector<k3::ChatMessage> history{
            {k3::ChatRole::User, prompt.at("question").get<std::string>(), "", ""}};
        const k3::GenerateResult result = session.chat(history, options);
        const auto expected = prompt.at("greedy_ids").get<std::vector<k3::TokenId>>();
        if (result.ids != expected) {
            std::fprintf(stderr, "FAIL: %zu ids, not the reference's %zu greedy ids\n",
                         result.ids.size(), expected.size());
            return 1;
        }
        std::printf("PASS: the demo's %zu reference ids with libk3engine alone\n",
                    expected.size());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }
}
