#pragma once
// The one reader of the JSON files the CLI tests check: run reports (k3 --out, k3 replay
// --report) and the checkpoints' expected.json. A missing or damaged file gives a
// discarded value (is_discarded()), which the caller's checks then report.

#include <QString>

#include <nlohmann/json.hpp>

#include <fstream>

inline nlohmann::json readJsonFile(const QString& path) {
    std::ifstream in(path.toStdString());
    return nlohmann::json::parse(in, nullptr, false);
}
