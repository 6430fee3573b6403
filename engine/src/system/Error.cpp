#include "k3/error.hpp"

namespace k3 {

const char* errorKindName(ErrorKind kind) {
    switch (kind) {
    case ErrorKind::Config:
        return "config";
    case ErrorKind::Format:
        return "format";
    case ErrorKind::FileRead:
        return "file";
    case ErrorKind::Io:
        return "io";
    case ErrorKind::Model:
        return "model";
    case ErrorKind::ContextFull:
        return "context";
    case ErrorKind::Memory:
        return "memory";
    case ErrorKind::Tokenizer:
        return "tokenizer";
    case ErrorKind::Chat:
        return "chat";
    case ErrorKind::Pack:
        return "pack";
    case ErrorKind::StaleTrunk:
        return "stale-trunk";
    case ErrorKind::Trunk:
        return "trunk";
    case ErrorKind::Cache:
        return "cache";
    case ErrorKind::Kernel:
        return "kernel";
    case ErrorKind::Hub:
        return "hub";
    case ErrorKind::Remote:
        return "remote";
    case ErrorKind::Api:
        return "api";
    case ErrorKind::State:
        return "state";
    case ErrorKind::Image:
        return "image";
    }
    return "unknown";
}

} // namespace k3
