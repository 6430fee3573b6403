#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QDockWidget>
#include <QLabel>
#include <QScrollArea>
#include <QSettings>
#include <QStackedBarSeries>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "panels/TokenTimingPanel.h"

// Issue 37 point 7: the timing chart's colours changed meaning with the theme (trunk I/O
// blue in Light and green in Dark, expert I/O the reverse, Dark's trunk I/O the green of
// accepted proposals), and the dock's footer line was cut off.
class TestTimingColours : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanup();
    void everySeriesKeepsItsColourInEveryTheme();
    void footerWrapsInsideTheDock();
};

namespace {
// Each series' colour by its legend name, and the accepted proposals' as "proposal".
QMap<QString, QColor> seriesColours(const TokenTimingPanel& panel) {
    QMap<QString, QColor> colours;
    auto* view = panel.findChild<QChartView*>();
    const auto* series = qobject_cast<QStackedBarSeries*>(view->chart()->series().value(0));
    for (QBarSet* set : series->barSets()) colours.insert(set->label(), set->color());
    colours.insert(QStringLiteral("proposal"), panel.proposalColor());
    return colours;
}
} // namespace

void TestTimingColours::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_timingcolours"));
    QStandardPaths::setTestModeEnabled(true); // never the user's settings
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
}

void TestTimingColours::cleanup() {
    AppSettings::applyTheme(QStringLiteral("system"));
}

void TestTimingColours::everySeriesKeepsItsColourInEveryTheme() {
    TokenTimingPanel panel;
    QMap<QString, QMap<QString, QColor>> byTheme;
    for (const QString& theme : {QStringLiteral("light"), QStringLiteral("dark")}) {
        AppSettings::applyTheme(theme);
        QCoreApplication::processEvents(); // the palette change reaches the panel
        byTheme.insert(theme, seriesColours(panel));
    }
    const QMap<QString, QColor> light = byTheme.value(QStringLiteral("light"));
    QCOMPARE(light.keys(), (QStringList{QStringLiteral("compute"), QStringLiteral("expert I/O"),
                                        QStringLiteral("proposal"), QStringLiteral("trunk I/O")}));
    QCOMPARE(byTheme.value(QStringLiteral("dark")), light);
    // Distinct for every series, with green kept for the proposals the summary names.
    QSet<QRgb> distinct;
    for (const QColor& c : light) distinct.insert(c.rgb());
    QCOMPARE(distinct.size(), 4);
    const QColor proposal = light.value(QStringLiteral("proposal"));
    QVERIFY(proposal.green() > proposal.red() && proposal.green() > proposal.blue());
    for (const QString& name :
         {QStringLiteral("trunk I/O"), QStringLiteral("expert I/O"), QStringLiteral("compute")}) {
        const QColor c = light.value(name);
        QVERIFY2(!(c.green() > c.red() && c.green() > c.blue()), qPrintable(name));
    }
}

// "5 tokens · 0.010 s/token on average · 4 from accepted proposals (green)" in the dock
// of an 800x600 window: every word of it on screen.
void TestTimingColours::footerWrapsInsideTheDock() {
    MainWindow window;
    window.resize(800, 600);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    TokenTimingPanel* panel = window.timingPanel();
    for (int i = 0; i < 5; ++i) panel->addToken(i, 0.006, 0.002, 0.002, i > 0);
    QCOMPARE(panel->summaryText(),
             QStringLiteral("5 tokens · 0.010 s/token on average · 4 from accepted proposals "
                            "(green)"));
    auto* footer = panel->findChild<QLabel*>(QString(), Qt::FindDirectChildrenOnly);
    QVERIFY(footer);
    QCOMPARE(footer->text(), panel->summaryText());
    auto* area = qobject_cast<QScrollArea*>(panel->parentWidget()->parentWidget());
    QVERIFY(area);
    QWidget* viewport = area->viewport();
    QTRY_VERIFY(footer->height() >= footer->heightForWidth(footer->width()));
    const QRect shown(footer->mapTo(viewport, QPoint(0, 0)), footer->size());
    QVERIFY2(viewport->rect().contains(shown),
             qPrintable(QStringLiteral("footer %1,%2 %3x%4 in a %5x%6 dock")
                            .arg(shown.x())
                            .arg(shown.y())
                            .arg(shown.width())
                            .arg(shown.height())
                            .arg(viewport->width())
                            .arg(viewport->height())));
}

QTEST_MAIN(TestTimingColours)
#include "tst_timingcolours.moc"
