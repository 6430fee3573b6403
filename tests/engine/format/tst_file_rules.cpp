// The one file-reading rule (issue 22, point 9): config.json, the tokenizer files, the
// index and the shards are refused, promptly and by name, when they are a FIFO (which
// used to block the open for good), a device (a link to /dev/zero used to be read to
// 4.2 GB) or a folder, and a file over its kind's size is refused with both sizes.
#include <QTemporaryDir>
#include <QTest>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include <k3/config.hpp>
#include <k3/read_file.hpp>
#include <k3/safetensors.hpp>
#include <k3/tokenizer.hpp>

namespace fs = std::filesystem;

namespace {

const fs::path kTiny = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";

// Runs f on another thread and returns its error message; fails the test if it blocks.
template <typename F> std::string errorOf(F f) {
    auto result = std::async(std::launch::async, [f] {
        try {
            f();
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    });
    if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
        qFatal("the read blocked (a FIFO opened without O_NONBLOCK?)");
    }
    return result.get();
}

// A copy of the tiny checkpoint in which `name` is replaced by what `make` puts there.
fs::path copyWith(const QTemporaryDir& tmp, const std::string& name,
                  const std::function<void(const fs::path&)>& make) {
    const fs::path dir = fs::path(tmp.path().toStdString()) / "model";
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(kTiny))
        if (e.path().filename() != name) fs::copy(e.path(), dir / e.path().filename());
    make(dir / name);
    return dir;
}

void fifo(const fs::path& p) {
    QVERIFY(::mkfifo(p.c_str(), 0600) == 0);
}
void zero(const fs::path& p) {
    fs::create_symlink("/dev/zero", p);
}

} // namespace

class TestFileRules : public QObject {
    Q_OBJECT
private slots:
    void configThatIsNotAFileIsRefused();
    void tokenizerFilesThatAreNotFilesAreRefused();
    void shardThatIsAFifoIsRefused();
    void oversizedFilesAreRefusedWithTheirSize();
    void apiKeyFileIsReadOneWay();
};

// Issue 35 item 20: k3 serve took the whole file, k3 --remote its first line; one reader
// now: the key on one line, whitespace around it dropped, anything else refused.
void TestFileRules::apiKeyFileIsReadOneWay() {
    QTemporaryDir tmp;
    const fs::path key = fs::path(tmp.path().toStdString()) / "key";
    const auto write = [&](const std::string& text) { std::ofstream(key) << text; };
    write("  sk-test-0123\r\n\n");
    QCOMPARE(k3::readApiKeyFile(key), std::string("sk-test-0123"));
    write("sk-test-0123\nsecond line\n");
    QCOMPARE(errorOf([&] { k3::readApiKeyFile(key); }),
             key.string() + ": the API key file holds more than one line; it should hold only "
                            "the key");
    write(" \n\t\n");
    QCOMPARE(errorOf([&] { k3::readApiKeyFile(key); }),
             key.string() + ": the API key file is empty (it should hold the API key)");
    write("sk-\x1b[2J");
    QCOMPARE(errorOf([&] { k3::readApiKeyFile(key); }),
             key.string() + ": the API key holds a control character (byte 0x1b at position 3)");
    write(std::string(4097, 'k'));
    QCOMPARE(errorOf([&] { k3::readApiKeyFile(key); }),
             key.string() + ": 4097 bytes, over the 4096 bytes a key file may have");
    const fs::path pipe = fs::path(tmp.path().toStdString()) / "pipe";
    fifo(pipe);
    QCOMPARE(errorOf([&] { k3::readApiKeyFile(pipe); }),
             pipe.string() + ": it is a FIFO (named pipe), not a regular file; refusing to read "
                             "it as the key file");
}

void TestFileRules::configThatIsNotAFileIsRefused() {
    for (const auto& make :
         {std::function<void(const fs::path&)>(fifo), std::function<void(const fs::path&)>(zero)}) {
        QTemporaryDir tmp;
        const fs::path dir = copyWith(tmp, "config.json", make);
        const std::string e = errorOf([dir] { k3::readModelConfig(dir / "config.json"); });
        QVERIFY2(e.find(dir.string() + "/config.json") != std::string::npos, e.c_str());
        QVERIFY2(e.find("not a regular file") != std::string::npos, e.c_str());
    }
    QTemporaryDir tmp;
    const fs::path dir =
        copyWith(tmp, "config.json", [](const fs::path& p) { fs::create_directory(p); });
    const std::string e = errorOf([dir] { k3::readModelConfig(dir / "config.json"); });
    QVERIFY2(e.find("it is a folder, not a regular file") != std::string::npos, e.c_str());
}

void TestFileRules::tokenizerFilesThatAreNotFilesAreRefused() {
    for (const char* name : {"tiktoken.model", "tokenizer_config.json"}) {
        QTemporaryDir tmp;
        const fs::path dir = copyWith(tmp, name, fifo);
        const std::string e = errorOf([dir] { k3::Tokenizer::fromDirectory(dir); });
        QVERIFY2(e.find(name) != std::string::npos, e.c_str());
        QVERIFY2(e.find("a FIFO (named pipe), not a regular file") != std::string::npos, e.c_str());
    }
}

void TestFileRules::shardThatIsAFifoIsRefused() {
    QTemporaryDir tmp;
    const fs::path dir = copyWith(tmp, "model-00002-of-00003.safetensors", fifo);
    const std::string e = errorOf([dir] { k3::Checkpoint::open(dir); });
    QVERIFY2(e.find("model-00002-of-00003.safetensors") != std::string::npos, e.c_str());
    QVERIFY2(e.find("not a regular file") != std::string::npos, e.c_str());
}

void TestFileRules::oversizedFilesAreRefusedWithTheirSize() {
    QTemporaryDir tmp;
    const fs::path big = fs::path(tmp.path().toStdString()) / "config.json";
    {
        std::ofstream out(big, std::ios::binary);
        out.seekp(std::streamoff(k3::kMaxConfigBytes)); // sparse: 16 MB + 1 byte
        out.put('}');
    }
    const std::string e = errorOf([big] { k3::readModelConfig(big); });
    QVERIFY2(e.find(std::to_string(k3::kMaxConfigBytes + 1) + " bytes, over the " +
                    std::to_string(k3::kMaxConfigBytes)) != std::string::npos,
             e.c_str());
    // Within the cap it is read whole.
    const fs::path small = fs::path(tmp.path().toStdString()) / "small.txt";
    std::ofstream(small) << "hello";
    QCOMPARE(k3::readRegularFile(small, 5, "file"), std::string("hello"));
    QVERIFY_THROWS_EXCEPTION(k3::FileReadError, k3::readRegularFile(small, 4, "file"));
}

QTEST_GUILESS_MAIN(TestFileRules)
#include "tst_file_rules.moc"
