#include <QListWidget>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "wizard/SetupWizard.h"
#include "wizard/SystemCheckPage.h"

class TestSetupWizard : public QObject {
    Q_OBJECT
private slots:
    void doctorRunsOffTheGuiThreadAndShowsVerdicts();
};

void TestSetupWizard::doctorRunsOffTheGuiThreadAndShowsVerdicts() {
    QTemporaryDir dir;
    SetupWizard wizard;
    SystemCheckPage* page = wizard.systemCheckPage();
    page->setModelDir(dir.path());
    page->setDiskSeconds(0.2);
    QSignalSpy finished(page, &SystemCheckPage::checksFinished);
    wizard.show();
    QVERIFY(QTest::qWaitForWindowExposed(&wizard));
    // The page starts the checks when shown and the GUI stays responsive meanwhile.
    QVERIFY(page->isRunning());
    QVERIFY(!page->isComplete());
    QVERIFY(finished.wait(20000));
    QVERIFY(page->report().has_value());
    QCOMPARE(page->checkList()->count(), 4);
    QStringList names;
    for (int i = 0; i < page->checkList()->count(); ++i)
        names << page->checkList()->item(i)->data(Qt::UserRole + 1).toString();
    QCOMPARE(names, (QStringList{"cpu", "memory", "disk-space", "disk-speed"}));
    QCOMPARE(page->isComplete(), page->report()->canRun());
    QVERIFY(page->isComplete()); // 24 GB machines run the model
}

QTEST_MAIN(TestSetupWizard)
#include "tst_setupwizard.moc"
