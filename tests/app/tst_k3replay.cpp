// `k3 replay TRACE` (issue 29): the peer's real 93-layer expert trace, sliced, replayed at
// several budgets; every TRUE hit rate and GB/token it prints is checked against an LRU
// written here independently of the engine's cache.
#include "K3Process.hpp"

#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <list>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using Record = std::pair<std::int32_t, std::int32_t>; // (layer, expert)

std::vector<Record> readTrace(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<Record> out;
    std::int32_t rec[2];
    while (in.read(reinterpret_cast<char*>(rec), sizeof rec)) out.emplace_back(rec[0], rec[1]);
    return out;
}

// The records of the first `passes` passes (a pass ends where the layer goes back down).
std::vector<Record> firstPasses(const std::vector<Record>& t, int passes) {
    std::vector<Record> out;
    int seen = 1;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (i > 0 && t[i].first < t[i - 1].first && ++seen > passes) break;
        out.push_back(t[i]);
    }
    return out;
}

struct Lru {
    std::uint64_t requests = 0, hits = 0, reuse = 0;
};

// Each layer visit asks once for each distinct expert, ascending, in waves of at most
// `capacity`; a wave's experts cannot evict each other; after the wave they are the
// most recent, the last one asked most of all.
Lru simulateLru(const std::vector<Record>& t, int capacity) {
    Lru r;
    std::list<std::int64_t> recent; // front: most recent
    std::unordered_map<std::int64_t, std::list<std::int64_t>::iterator> where;
    for (std::size_t i = 0; i < t.size();) {
        const std::int32_t layer = t[i].first;
        std::set<std::int32_t> distinct;
        std::size_t records = 0;
        for (; i < t.size() && t[i].first == layer; ++i, ++records) distinct.insert(t[i].second);
        r.reuse += records - distinct.size();
        const std::vector<std::int32_t> order(distinct.begin(), distinct.end());
        for (std::size_t first = 0; first < order.size(); first += std::size_t(capacity)) {
            const std::size_t end = std::min(order.size(), first + std::size_t(capacity));
            std::set<std::int64_t> wave;
            std::size_t need = 0;
            for (std::size_t j = first; j < end; ++j) {
                const std::int64_t key = (std::int64_t(layer) << 32) | order[j];
                wave.insert(key);
                ++r.requests;
                if (where.count(key))
                    ++r.hits;
                else
                    ++need;
            }
            for (auto it = recent.end(); where.size() + need > std::size_t(capacity);) {
                --it; // from the least recent, skipping the wave's own
                if (wave.count(*it)) continue;
                where.erase(*it);
                it = recent.erase(it);
            }
            for (std::size_t j = first; j < end; ++j) {
                const std::int64_t key = (std::int64_t(layer) << 32) | order[j];
                if (auto w = where.find(key); w != where.end()) recent.erase(w->second);
                recent.push_front(key);
                where[key] = recent.begin();
            }
        }
    }
    return r;
}

} // namespace

class TestK3Replay : public QObject {
    Q_OBJECT
private slots:
    void hitRatesMatchAnIndependentLru();
    void badBudgetIsAUsageError();
};

void TestK3Replay::hitRatesMatchAnIndependentLru() {
    const std::vector<Record> all = readTrace(K3_PEER_DIR "/expert_trace.bin");
    QCOMPARE(all.size(), std::size_t(100096));
    const std::vector<Record> slice = firstPasses(all, 2);
    QCOMPARE(slice.size(), std::size_t(7360 + 8832)); // passes of 5 and 6 positions x 16
    QTemporaryDir tmp;
    const QString file = tmp.filePath("slice.bin");
    {
        std::ofstream out(file.toStdString(), std::ios::binary);
        for (const Record& r : slice) {
            const std::int32_t rec[2] = {r.first, r.second};
            out.write(reinterpret_cast<const char*>(rec), sizeof rec);
        }
    }
    // 1 MB slots, 1 MB per expert read, 1 GB/s: GB -> slots x 1000, GB/token -> s/token.
    // 16 and 64 are below a layer visit's distinct experts (waves); around 6,000 a pass
    // starts to fit (the hit rate climbs); 20,000 holds the whole slice.
    const std::vector<int> capacities{16, 64, 1000, 5800, 6000, 6100, 6200, 9000, 20000};
    QStringList budgets;
    for (int c : capacities) budgets << QString::number(double(c) / 1000.0);
    const K3Run r = runK3({"replay", file, "--cache-gb", budgets.join(','), "--expert-mb", "1",
                           "--slot-mb", "1", "--disk-gbps", "1", "--compute-s", "0.5"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("(16192 records, 2 passes, 2 tokens)"), qPrintable(r.out));
    const QStringList lines = r.out.split('\n');
    for (int c : capacities) {
        const Lru want = simulateLru(slice, c);
        const double hit = 100.0 * double(want.hits) / double(want.requests);
        const double gbPerToken = double(want.requests - want.hits) * 1e6 / 1e9 / 2;
        const double predicted = std::max(gbPerToken, 0.5);
        QStringList row;
        for (const QString& line : lines)
            if (line.startsWith(QString::number(double(c) / 1000.0) + ' '))
                row = line.split(' ', Qt::SkipEmptyParts);
        QVERIFY2(row.size() == 7, qPrintable(r.out));
        QCOMPARE(row[1].toInt(), c);
        QCOMPARE(row[2], QString::asprintf("%.2f%%", hit));
        QCOMPARE(row[4], QString::asprintf("%.3f", gbPerToken));
        QCOMPARE(row[6], QString::asprintf("%.3f", predicted));
    }
    // Room for every expert of the slice: each read once, every later request a TRUE hit.
    std::set<Record> distinct(slice.begin(), slice.end());
    const Lru roomy = simulateLru(slice, 20000);
    QCOMPARE(roomy.requests - roomy.hits, std::uint64_t(distinct.size()));
    QVERIFY2(r.out.contains(
                 QString("%1 more selections were the same expert chosen again").arg(roomy.reuse)),
             qPrintable(r.out));
}

void TestK3Replay::badBudgetIsAUsageError() {
    const K3Run r = runK3({"replay", K3_PEER_DIR "/expert_trace.bin", "--cache-gb", "1,lots"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("\"lots\" is not a positive number of GB"), qPrintable(r.err));
}

QTEST_GUILESS_MAIN(TestK3Replay)
#include "tst_k3replay.moc"
