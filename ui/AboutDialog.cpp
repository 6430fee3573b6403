#include "AboutDialog.h"

#include <QDialogButtonBox>
#include <QLabel>
#include <QVBoxLayout>

#include <k3/system.hpp>
#include <k3/version.hpp>

AboutDialog::AboutDialog(QWidget* parent) : QDialog(parent) {
    setWindowTitle(tr("About k3chat"));
    auto* label = new QLabel(buildSummary(), this);
    label->setTextFormat(Qt::PlainText);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    label->setWordWrap(true);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(label);
    layout->addWidget(buttons);
}

QString AboutDialog::buildSummary() {
    QString text = tr("k3chat %1\nRun Kimi K3 on the computer you already own.\n\n")
                       .arg(QString::fromUtf8(k3::kVersion));
    text += tr("CPU kernels: %1\n").arg(QString::fromStdString(k3::detectCpuFeatures().summary()));
    text += tr("Qt %1\n").arg(QString::fromUtf8(qVersion()));
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
    text += tr("Code highlighting: KSyntaxHighlighting is available to this build\n");
#else
    text += tr("Code highlighting: off (this build has no KSyntaxHighlighting; Debian 12 "
               "ships no KF6, so code blocks are shown in a monospace font)\n");
#endif
    return text;
}
