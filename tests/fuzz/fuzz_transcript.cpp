// Transcript JSONL (the user's saved conversations). An accepted transcript written
// back with formatTranscript() must read back to the same messages.
#include "FuzzSupport.hpp"

#include <k3/chat.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<k3::ChatMessage> messages;
    try {
        messages = k3::parseTranscript(k3fuzz::asText(data, size), "fuzz.jsonl");
    } catch (const k3::ChatError&) {
        return 0;
    }
    const std::string written = k3::formatTranscript(messages);
    bool validUtf8 = true;
    for (const auto& m : messages)
        validUtf8 = validUtf8 && k3::isValidUtf8(m.content) &&
                    k3::isValidUtf8(m.reasoningContent) && k3::isValidUtf8(m.name) &&
                    k3::isValidUtf8(m.invalid);
    try {
        const auto again = k3::parseTranscript(written, "rewritten.jsonl");
        if (validUtf8) k3fuzz::check(again == messages, "transcript does not round-trip");
    } catch (const k3::ChatError& e) {
        k3fuzz::broken(e.what());
    }
    return 0;
}
