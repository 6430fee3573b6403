#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>

#include "wizard/MemoryPage.h"

#include <QTemporaryDir>

#include <k3/pack.hpp>

// Issue 37 point 3: typing `1.5` into the wizard's trunk box gave 1.00 GB (twice). A
// double-click had selected only "1" of "1.00 GB": "1.5" typed over it became "1.00" (the
// "." and the "5" made the text invalid and were dropped). A typed size is taken as
// typed, however the old number was selected, in the user's locale.
class TestMemoryPageInput : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void typedSizeIsTakenAsTyped_data();
    void typedSizeIsTakenAsTyped();

private:
    const QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    QTemporaryDir m_tmp;
    QString m_trunk; // packed: the trunk box takes a budget only for a packed trunk
};

void TestMemoryPageInput::initTestCase() {
    QVERIFY(m_tmp.isValid());
    m_trunk = m_tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_tiny.toStdString(), m_trunk.toStdString());
}

void TestMemoryPageInput::typedSizeIsTakenAsTyped_data() {
    QTest::addColumn<QLocale>("locale");
    QTest::addColumn<QString>("select"); // how the old number is selected
    QTest::addColumn<QString>("typed");
    QTest::addColumn<QString>("shown");
    QTest::addColumn<double>("value");
    const QLocale english(QLocale::English, QLocale::UnitedStates);
    const QLocale german(QLocale::German, QLocale::Germany);
    const QLocale french(QLocale::French, QLocale::France);
    QTest::newRow("en ctrl+a") << english << "ctrl+a"
                               << "1.5"
                               << "1.50 GB" << 1.5;
    QTest::newRow("en double-click") << english << "double-click"
                                     << "1.5"
                                     << "1.50 GB" << 1.5;
    QTest::newRow("en end, backspaces") << english << "backspaces"
                                        << "0.5"
                                        << "0.50 GB" << 0.5;
    QTest::newRow("de double-click") << german << "double-click"
                                     << "1,5"
                                     << "1,50 GB" << 1.5;
    QTest::newRow("de ctrl+a, a point") << german << "ctrl+a"
                                        << "1.5"
                                        << "1,50 GB" << 1.5;
    QTest::newRow("fr ctrl+a, a point") << french << "ctrl+a"
                                        << "1.5"
                                        << "1,50 GB" << 1.5;
}

void TestMemoryPageInput::typedSizeIsTakenAsTyped() {
    QFETCH(QLocale, locale);
    QFETCH(QString, select);
    QFETCH(QString, typed);
    QFETCH(QString, shown);
    QFETCH(double, value);
    QLocale::setDefault(locale);
    MemoryPage page;
    QSignalSpy ready(&page, &MemoryPage::planReady);
    page.setAvailableBytes(16'000'000'000ull);
    page.setModel(m_tiny, m_trunk);
    page.show();
    QVERIFY(QTest::qWaitForWindowActive(&page));
    QVERIFY(ready.count() > 0 || ready.wait(10000));
    page.setCustomGB(2, 2); // the old numbers: "2.00 GB" (0 would read as words)
    QTRY_VERIFY_WITH_TIMEOUT(!page.isPlanning(), 10000);
    for (const char* name : {"trunkGB", "cacheGB"}) {
        auto* box = page.findChild<QDoubleSpinBox*>(QString::fromLatin1(name));
        QVERIFY(box);
        box->setFocus();
        QTRY_VERIFY(box->hasFocus());
        QLineEdit* edit = box->findChild<QLineEdit*>();
        const QPoint inNumber(4, edit->height() / 2);
        if (select == QLatin1String("ctrl+a")) {
            QTest::keyClick(box, Qt::Key_A, Qt::ControlModifier);
        } else if (select == QLatin1String("double-click")) {
            QTest::mouseDClick(edit, Qt::LeftButton, {}, inNumber);
        } else { // the cursor to the end, then the old number deleted
            QTest::keyClick(box, Qt::Key_End);
            for (int i = 0; i < 8; ++i) QTest::keyClick(box, Qt::Key_Backspace);
        }
        QTest::keyClicks(box, typed); // keys go to the box, which hands them to its editor
        QTRY_VERIFY_WITH_TIMEOUT(!page.isPlanning(), 10000); // the plans asked while typing
        QTest::keyClick(box, Qt::Key_Tab);                   // leaving the box keeps what was typed
        QTRY_VERIFY_WITH_TIMEOUT(!page.isPlanning(), 10000);
        QCOMPARE(box->value(), value);
        QCOMPARE(box->text(), shown);
    }
    QLocale::setDefault(QLocale::c());
}

QTEST_MAIN(TestMemoryPageInput)
#include "tst_memorypageinput.moc"
