// The strict chunked-body decoder k3 serve runs before cpp-httplib sees a request
// (issue 35 item 17): every framing error is refused with its reason, trailers are
// read and dropped, the limit is found from a chunk's size, and input that arrives a
// byte at a time decodes exactly as input that arrives whole.
#include "cli/ChunkedBody.hpp"

#include <QtTest>

using k3cli::ChunkedBodyDecoder;
using Status = ChunkedBodyDecoder::Status;

class TestChunkedBody : public QObject {
    Q_OBJECT
private slots:
    void decodes_data();
    void decodes();
    void byteAtATimeGivesTheSameResult();
    void limitIsFoundFromTheChunkSize();
};

void TestChunkedBody::decodes_data() {
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<int>("status");
    QTest::addColumn<QByteArray>("body");
    QTest::addColumn<int>("consumed");
    QTest::addColumn<QString>("error");
    const auto row = [](const char* name, const QByteArray& in, Status st, const QByteArray& body,
                        int consumed, const QString& error = {}) {
        QTest::newRow(name) << in << int(st) << body << consumed << error;
    };
    row("one chunk", "5\r\nhello\r\n0\r\n\r\nNEXT", Status::Done, "hello", 15);
    row("two chunks, upper-case hex", "3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n", Status::Done,
        "abc0123456789", 28);
    row("extension", "5;name=value\r\nhello\r\n0;last\r\n\r\n", Status::Done, "hello", 31);
    row("leading zeros", "0005\r\nhello\r\n000\r\n\r\n", Status::Done, "hello", 20);
    row("trailer fields", "5\r\nhello\r\n0\r\nX-Checksum: 1\r\nX-Other:\r\n\r\n", Status::Done,
        "hello", 40);
    row("empty body", "0\r\n\r\n", Status::Done, "", 5);
    row("incomplete data", "5\r\nhel", Status::NeedMore, "hel", 6);
    row("no last chunk yet", "5\r\nhello\r\n", Status::NeedMore, "hello", 10);
    row("no CRLF after the data", "5\r\nhelloXX0\r\n\r\n", Status::Invalid, "hello", 8,
        "chunk 1: its data is not followed by CRLF");
    row("plus sign", "+5\r\nhello\r\n0\r\n\r\n", Status::Invalid, "", 4,
        "chunk 1: the size line \"+5\" is not HEX[;extension]");
    row("0x prefix", "0x5\r\nhello\r\n0\r\n\r\n", Status::Invalid, "", 5,
        "chunk 1: the size line \"0x5\" is not HEX[;extension]");
    row("space before the size", " 5\r\nhello\r\n0\r\n\r\n", Status::Invalid, "", 4,
        "chunk 1: the size line \" 5\" is not HEX[;extension]");
    row("junk after the size", "5 x\r\nhello\r\n0\r\n\r\n", Status::Invalid, "", 5,
        "chunk 1: the size line \"5 x\" is not HEX[;extension]");
    row("control character in an extension", "5;a\x01\r\nhello\r\n", Status::Invalid, "", 6,
        "chunk 1: the size line \"5;a?\" is not HEX[;extension]");
    row("bare LF size line", "5\nhello\r\n0\r\n\r\n", Status::Invalid, "", 0,
        "chunk 1: its size line ends in a bare LF (HTTP needs CRLF)");
    row("second chunk bad", "1\r\na\r\nzz\r\n", Status::Invalid, "a", 10,
        "chunk 2: the size line \"zz\" is not HEX[;extension]");
    row("trailer without colon", "0\r\nnot a field\r\n\r\n", Status::Invalid, "", 16,
        "the trailer line \"not a field\" is not NAME: VALUE");
    row("trailer bare LF", "0\r\nX: 1\n\r\n", Status::Invalid, "", 3,
        "a trailer line ends in a bare LF (HTTP needs CRLF)");
    row("size overflow", "100000000000000000\r\n", Status::Invalid, "", 20,
        "chunk 1: its size \"100000000000000000\" is too large");
}

void TestChunkedBody::decodes() {
    QFETCH(QByteArray, input);
    QFETCH(int, status);
    QFETCH(QByteArray, body);
    QFETCH(int, consumed);
    QFETCH(QString, error);
    ChunkedBodyDecoder d(1 << 20, 1024);
    QCOMPARE(int(d.decode(std::string_view(input.constData(), input.size()))), status);
    QCOMPARE(QByteArray::fromStdString(d.body()), body);
    QCOMPARE(int(d.consumed()), consumed);
    QCOMPARE(QString::fromStdString(d.error()), error);
}

void TestChunkedBody::byteAtATimeGivesTheSameResult() {
    const std::string input = "3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\nREST";
    ChunkedBodyDecoder whole(1 << 20, 1024);
    QCOMPARE(whole.decode(input), Status::Done);
    ChunkedBodyDecoder bytes(1 << 20, 1024);
    Status s = Status::NeedMore;
    for (std::size_t n = 1; n <= input.size() && s == Status::NeedMore; ++n)
        s = bytes.decode(std::string_view(input).substr(0, n));
    QCOMPARE(s, Status::Done);
    QCOMPARE(bytes.body(), std::string("abc0123456789abcdef"));
    QCOMPARE(bytes.consumed(), whole.consumed());
    QCOMPARE(input.substr(bytes.consumed()), std::string("REST"));
}

void TestChunkedBody::limitIsFoundFromTheChunkSize() {
    ChunkedBodyDecoder d(10, 1024);
    // 8 bytes fit; a chunk that says 3 more is refused before its data arrives.
    QCOMPARE(d.decode("8\r\n12345678\r\n3\r\n"), Status::TooLarge);
    QCOMPARE(d.body(), std::string("12345678"));
    ChunkedBodyDecoder exact(10, 1024);
    QCOMPARE(exact.decode("a\r\n0123456789\r\n0\r\n\r\n"), Status::Done);
    // The trailer section has its own limit.
    ChunkedBodyDecoder trailers(10, 16);
    QCOMPARE(trailers.decode("0\r\nX: 0123456789abcdef\r\n\r\n"), Status::Invalid);
    QCOMPARE(trailers.error(), std::string("the trailer section is over 16 bytes"));
}

QTEST_APPLESS_MAIN(TestChunkedBody)
#include "tst_chunkedbody.moc"
