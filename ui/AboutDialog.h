#pragma once

#include <QDialog>

// Version, engine build facts (SIMD path, highlighting) and the project's purpose.
class AboutDialog : public QDialog {
    Q_OBJECT
public:
    explicit AboutDialog(QWidget* parent = nullptr);

    // The text shown, so tests and bug reports can read it.
    static QString buildSummary();
};
