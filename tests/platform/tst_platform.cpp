// The platform layer's calls, each checked for the value it must give, in a scratch
// folder with a non-ASCII name (UTF-8 on POSIX, wide paths on Windows). Exit code 0
// when every check passed; each failure is printed with what was expected.
#include "k3/console.hpp"
#include "k3/net.hpp"
#include "k3/system.hpp"
#include "platform/Platform.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

namespace platform = k3::platform;
namespace fs = std::filesystem;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
    if (!ok) ++failures;
}

bool writeWhole(const fs::path& path, const std::string& text) {
    platform::File file = platform::File::open(
        path, platform::open::Write | platform::open::Create | platform::open::Truncate);
    return file.valid() && file.write(text.data(), text.size()) == std::int64_t(text.size()) &&
           file.close();
}

std::string readWhole(const fs::path& path) {
    platform::File file = platform::File::open(path, platform::open::Read);
    std::string text;
    char buffer[256];
    for (std::int64_t n; file.valid() && (n = file.read(buffer, sizeof buffer)) > 0;)
        text.append(buffer, std::size_t(n));
    return text;
}

void atomicReplace(const fs::path& dir) {
    const fs::path target = dir / "state.txt";
    for (const std::string text : {"first", "second"}) {
        fs::path temporary = dir / ".state.txt.tmp.XXXXXX";
        platform::File file = platform::File::createTemporary(temporary);
        check(file.valid(), "createTemporary makes a file");
        check(temporary.filename() != ".state.txt.tmp.XXXXXX" &&
                  temporary.filename().string().size() == std::strlen(".state.txt.tmp.XXXXXX"),
              "createTemporary replaces XXXXXX in the name (" + temporary.filename().string() +
                  ")");
        check(file.write(text.data(), text.size()) == std::int64_t(text.size()), "write");
        check(file.syncToDisk(), "syncToDisk");
        check(file.close(), "close");
        check(platform::replaceFile(temporary, target), "replaceFile over " + text);
        platform::FileInfo gone;
        check(!platform::fileInfo(temporary, gone) && errno == ENOENT,
              "the temporary name is gone after replaceFile (ENOENT)");
        check(readWhole(target) == text, "the target reads back \"" + text + "\"");
    }
    platform::FileInfo info;
    check(platform::fileInfo(target, info), "fileInfo of the replaced file");
    check(info.type == platform::FileType::Regular, "it is a regular file");
    check(info.size == 6, "its size is 6 (\"second\"), got " + std::to_string(info.size));
    check(info.links == 1, "it has one link");

    platform::File file = platform::File::open(target, platform::open::ReadWrite);
    char middle[4] = {};
    check(file.readAt(middle, 3, 3) == 3 && std::string(middle) == "ond",
          "readAt(3, 3) is \"ond\"");
    check(file.readAt(middle, 3, 6) == 0, "readAt at the end of the file reads 0 bytes");
    check(file.writeAt("S", 1, 0) == 1, "writeAt(0)");
    check(file.truncate(2), "truncate(2)");
    check(file.info(info) && info.size == 2, "File::info gives the truncated size 2");
    file.close();
    check(readWhole(target) == "Se", "the truncated, rewritten file reads \"Se\"");

    check(platform::removeFile(target), "removeFile");
    check(!platform::removeFile(target) && errno == ENOENT, "removeFile again: ENOENT");
}

void uncachedReads(const fs::path& dir) {
    constexpr std::size_t page = platform::kUncachedAlignment;
    const fs::path path = dir / "pages.bin";
    std::string pages(3 * page, '\0');
    for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = char(i * 7 % 251);
    check(writeWhole(path, pages), "write 3 pages");
    platform::File file =
        platform::File::open(path, platform::open::Read | platform::open::Uncached);
    if (!file.valid()) {
        check(errno == EINVAL, "an uncached open is refused only with EINVAL (tmpfs)");
        std::printf("NOTE uncached reads are refused by this filesystem\n");
        return;
    }
    auto* buffer = static_cast<char*>(platform::allocateAligned(page, 2 * page));
    check(buffer && reinterpret_cast<std::uintptr_t>(buffer) % page == 0,
          "allocateAligned gives 4096-aligned memory");
    check(file.readAt(buffer, 2 * page, page) == std::int64_t(2 * page),
          "an uncached readAt of pages 1-2 reads 8192 bytes");
    check(std::memcmp(buffer, pages.data() + page, 2 * page) == 0, "with the bytes written");
    check(file.readAt(buffer, 2 * page, 2 * page) == std::int64_t(page),
          "an uncached readAt past the end reads the last 4096 bytes");
    platform::freeAligned(buffer);
}

void identityChecks(const fs::path& dir) {
    platform::FileInfo info;
    check(platform::fileInfo(dir, info) && info.type == platform::FileType::Directory,
          "fileInfo of a folder says Directory");
    check(!platform::fileInfo(dir / "missing", info) && errno == ENOENT,
          "fileInfo of a missing file: false, ENOENT");
    const fs::path target = dir / "target.txt", link = dir / "link.txt";
    check(writeWhole(target, "x"), "write the link's target");
    std::error_code ec;
    fs::create_symlink(target, link, ec);
    if (ec) { // Windows without developer mode may not create links
        std::printf("NOTE no symbolic link could be made here: %s\n", ec.message().c_str());
        return;
    }
    check(platform::fileInfo(link, info, false) && info.type == platform::FileType::Symlink,
          "fileInfo without following says Symlink");
    check(platform::fileInfo(link, info, true) && info.type == platform::FileType::Regular,
          "fileInfo following the link says Regular");
    fs::path read;
    check(platform::readLink(link, read) && read == target, "readLink gives the target");
    platform::File file =
        platform::File::open(link, platform::open::ReadWrite | platform::open::NoFollow);
    check(!file.valid() && errno == ELOOP, "open with NoFollow refuses the link with ELOOP");
}

void locks(const fs::path& dir) {
    const unsigned flags = platform::open::ReadWrite | platform::open::Create;
    platform::File first = platform::File::open(dir / ".lock", flags, 0600);
    platform::File second = platform::File::open(dir / ".lock", flags, 0600);
    check(first.valid() && second.valid(), "two opens of one lock file");
    check(first.lockExclusiveNoWait(), "the first takes the lock");
    check(!second.lockExclusiveNoWait() && errno == EWOULDBLOCK,
          "the second is refused with EWOULDBLOCK");
    first.close();
    check(second.lockExclusiveNoWait(), "the second takes it once the first is closed");
}

void stdioHandOver(const fs::path& dir) {
    platform::File file = platform::File::open(dir / "stream.bin",
                                               platform::open::ReadWrite | platform::open::Create);
    std::FILE* stream = file.releaseToStdio("r+b");
    check(stream != nullptr && !file.valid(), "releaseToStdio hands the file over");
    if (!stream) return;
    check(std::fwrite("abcdef", 1, 6, stream) == 6, "fwrite 6 bytes");
    check(platform::truncateStream(stream, 2), "truncateStream(2)");
    check(std::fclose(stream) == 0, "fclose");
    check(readWhole(dir / "stream.bin") == "ab", "the stream's file reads \"ab\"");
}

void machineFacts(const fs::path& dir) {
    const auto free = platform::freeDiskBytes(dir);
    check(free && *free > 0, "freeDiskBytes of the scratch folder is above 0");
    check(!platform::freeDiskBytes(dir / "missing" / "deeper"), "freeDiskBytes of no folder: none");
    std::vector<char> touched(8 << 20, 1); // 8 MB resident at least once
    check(platform::peakResidentBytes() >= touched.size(),
          "peakResidentBytes is at least the 8 MB just touched, got " +
              std::to_string(platform::peakResidentBytes()));
    const auto memory = k3::readMemoryInfo();
    check(memory && memory->totalBytes > 0 && memory->availableBytes <= memory->totalBytes,
          "readMemoryInfo: a total, and available within it");
    check(platform::processId() > 0, "processId");
    const std::string name = "pl\xc3\xa4tform-\xe2\x9c\x93";
    check(platform::utf8Path(platform::pathFromUtf8(name)) == name, "UTF-8 path round trip");
}

// The front ends' platform calls (k3/net.hpp, k3/console.hpp) that need no peer: address
// literals, the wake-up a server's reader thread waits on, and stdout set aside.
void frontEndCalls() {
    namespace net = k3::net;
    const auto loopback = net::parseIpv4("127.0.0.1");
    check(loopback && *loopback == 0x7f000001u, "parseIpv4(127.0.0.1) is 0x7f000001 in host order");
    check(!net::parseIpv4("256.0.0.1") && !net::parseIpv4("::1") && !net::parseIpv4("localhost"),
          "parseIpv4 refuses 256.0.0.1, ::1 and localhost");
    check(net::isIpv6Literal("::1") && net::isIpv6Literal("fe80::1"), "::1 and fe80::1 are IPv6");
    check(!net::isIpv6Literal("127.0.0.1") && !net::isIpv6Literal("[::1]"),
          "127.0.0.1 and [::1] (brackets) are not IPv6 literals");

    net::Wakeup wakeup;
    check(wakeup.valid(), "a Wakeup is made");
    net::SocketWait wait{wakeup.waitable(), net::ready::Read, 0};
    check(net::waitSockets(&wait, 1, 0) == 0 && wait.ready == 0, "an unwoken Wakeup is not ready");
    wakeup.wake();
    wakeup.wake(); // twice: one drain takes both
    check(net::waitSockets(&wait, 1, 5000) == 1 && (wait.ready & net::ready::Read),
          "a woken Wakeup is ready to read");
    wakeup.drain();
    check(net::waitSockets(&wait, 1, 0) == 0, "a drained Wakeup is not ready again");

    const std::intptr_t report = k3::console::divertStdout();
    check(report >= 0, "divertStdout gives a handle");
    std::printf("(stdout diverted to stderr)\n");
    check(k3::console::writeDiverted(report, "(written to the real stdout)\n"),
          "writeDiverted writes to the real stdout");
    k3::console::restoreStdout(report);
}

} // namespace

int main(int argc, char** argv) {
    const fs::path base = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "tst_platform";
    const fs::path dir = base / platform::pathFromUtf8("pl\xc3\xa4tform-\xe2\x9c\x93");
    std::error_code ec;
    fs::remove_all(base, ec);
    fs::create_directories(dir, ec);
    if (ec) {
        std::printf("FAIL cannot make the scratch folder %s: %s\n", platform::utf8Path(dir).c_str(),
                    ec.message().c_str());
        return 1;
    }
    atomicReplace(dir);
    uncachedReads(dir);
    identityChecks(dir);
    locks(dir);
    stdioHandOver(dir);
    machineFacts(dir);
    frontEndCalls();
    fs::remove_all(base, ec);
    std::printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
