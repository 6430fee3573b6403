// Aligned (O_DIRECT) reads agree with buffered reads byte for byte, at offsets and
// lengths that are not block multiples; refusals and short reads are errors.
#include "k3/aligned_io.hpp"
#include "k3/safetensors.hpp"

#include <QTemporaryDir>
#include <QtTest>

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <linux/magic.h>

namespace {

const std::string kCacheShard =
    K3_PEER_DIR "/cache/model-00001-of-00001.safetensors";

std::string ioRefusal(const std::function<void()>& f) {
    try {
        f();
    } catch (const k3::IoError& e) {
        return e.what();
    }
    return {};
}

// Byte i of the pattern files: never periodic in 4096, so a misplaced window shows.
unsigned char patternByte(std::uint64_t i) {
    return static_cast<unsigned char>((i * 131 + i / 4093) & 0xff);
}

void writePattern(const std::string& path, std::uint64_t size) {
    std::string bytes(size, '\0');
    for (std::uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(patternByte(i));
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(size));
}

} // namespace

class TestAlignedFile : public QObject {
    Q_OBJECT

private slots:
    // Every expert tensor of the peer's cache fixture (1632-byte experts, data starting
    // at byte 20608: nothing is 4096-aligned), through O_DIRECT and through pread.
    void tensorsMatchBufferedPath() {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(kCacheShard);
        const k3::AlignedFile direct(kCacheShard);
        const k3::AlignedFile buffered(kCacheShard, k3::AlignedFile::Mode::Buffered);
        QVERIFY(!buffered.direct());
        if (!direct.direct()) qWarning("O_DIRECT unavailable here: both paths are buffered");
        QCOMPARE(direct.size(), std::uint64_t{59776});
        int checked = 0;
        for (const auto& [name, t] : ckpt.tensors()) {
            std::vector<unsigned char> a(t.nbytes), b(t.nbytes);
            direct.read(t.offset, a.data(), a.size());
            buffered.read(t.offset, b.data(), b.size());
            QVERIFY2(a == b, name.c_str());
            // The content rule of the fixture: consecutive bytes step by one modulo 251.
            for (std::size_t i = 1; i < a.size(); ++i) QCOMPARE(int(a[i]), (a[0] + int(i)) % 251);
            ++checked;
        }
        QCOMPARE(checked, 144);
        // The whole last expert: its window runs past EOF (59776 is not a 4096 multiple).
        std::vector<unsigned char> tail(1632), tailRef(1632);
        direct.read(59776 - 1632, tail.data(), tail.size());
        buffered.read(59776 - 1632, tailRef.data(), tailRef.size());
        QVERIFY(tail == tailRef);
        QCOMPARE(int(tail.back()), 0x2b); // last byte of experts.23.w3.weight_scale
    }

    // Larger than the 8 MB bounce buffer, unaligned at both ends.
    void largeUnalignedRead() {
        QTemporaryDir dir;
        const std::string path = dir.path().toStdString() + "/big.bin";
        const std::uint64_t size = (std::uint64_t{9} << 20) + 12345;
        writePattern(path, size);
        const k3::AlignedFile file(path);
        for (auto [offset, length] : {std::pair<std::uint64_t, std::size_t>{4097, 9'000'001},
                                      {0, size},
                                      {size - 1, 1},
                                      {4095, 2},
                                      {8192, 4096}}) {
            std::vector<unsigned char> got(length);
            file.read(offset, got.data(), length);
            for (std::size_t i = 0; i < length; ++i)
                if (got[i] != patternByte(offset + i))
                    QFAIL(qPrintable(QString("offset %1 length %2: byte %3 differs")
                                         .arg(offset)
                                         .arg(length)
                                         .arg(i)));
        }
        file.read(100, nullptr, 0); // an empty read touches nothing
    }

    // tmpfs has no O_DIRECT: open gives EINVAL and the file stays on the buffered path.
    void fallbackWhereDirectIsRefused() {
        struct statfs fs {};
        if (::statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC)
            QSKIP("no tmpfs at /dev/shm");
        const std::string path = "/dev/shm/k3_tst_alignedfile_" + std::to_string(::getpid());
        writePattern(path, 10000);
        // Linux 6.6+ gave tmpfs O_DIRECT; only a refusing filesystem tests the fallback.
        const int probe = ::open(path.c_str(), O_RDONLY | O_DIRECT);
        const bool refused = probe < 0 && errno == EINVAL;
        if (probe >= 0) ::close(probe);
        if (!refused) {
            ::unlink(path.c_str());
            QSKIP("this kernel's tmpfs accepts O_DIRECT");
        }
        {
            const k3::AlignedFile file(path);
            QVERIFY(!file.direct());
            std::vector<unsigned char> got(5000);
            file.read(4321, got.data(), got.size());
            for (std::size_t i = 0; i < got.size(); ++i) QCOMPARE(got[i], patternByte(4321 + i));
        }
        ::unlink(path.c_str());
    }

    void shortReadsAreErrors() {
        QTemporaryDir dir;
        const std::string path = dir.path().toStdString() + "/short.bin";
        writePattern(path, 10000);
        for (auto mode : {k3::AlignedFile::Mode::Auto, k3::AlignedFile::Mode::Buffered}) {
            const k3::AlignedFile file(path, mode);
            std::vector<unsigned char> buf(8192);
            std::string m = ioRefusal([&] { file.read(9000, buf.data(), 2000); });
            QVERIFY2(m.find(path + ": read of 2000 bytes at offset 9000 runs past the end of the "
                                   "file (10000 bytes)") == 0,
                     m.c_str());
            // The file shrinks under an open reader: no silent zeros.
            QVERIFY(::truncate(path.c_str(), 5000) == 0);
            m = ioRefusal([&] { file.read(4000, buf.data(), 3000); });
            QVERIFY2(m.find(path + ": short read at offset ") == 0, m.c_str());
            QVERIFY2(m.find("of 3000 bytes") != std::string::npos ||
                         m.find("got 1000") != std::string::npos,
                     m.c_str());
            writePattern(path, 10000);
        }
        const std::string m = ioRefusal([&] { k3::AlignedFile f(path + ".missing"); });
        QVERIFY2(m.find(path + ".missing: cannot open") == 0, m.c_str());
    }
};

QTEST_GUILESS_MAIN(TestAlignedFile)
#include "tst_alignedfile.moc"
