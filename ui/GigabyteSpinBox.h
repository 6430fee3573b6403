#pragma once

#include <QDoubleSpinBox>

// A size in GB (by default 0 to 4096, two decimals) that takes what is typed. A plain spin box
// kept what was left of the old number: a double-click selected only "1" of "1.00 GB",
// so typing "1.5" gave "1.00" (the "." and "5" made it invalid and were dropped), and
// End put the cursor after the suffix, where Backspace could delete nothing.
// Either "." or "," is the decimal point: a size in GB has no thousands to group.
class GigabyteSpinBox : public QDoubleSpinBox {
    Q_OBJECT
public:
    explicit GigabyteSpinBox(QWidget* parent = nullptr);

    QValidator::State validate(QString& text, int& pos) const override;

protected:
    void keyPressEvent(QKeyEvent* event) override;
    // A double-click in the number selects all of it.
    bool eventFilter(QObject* watched, QEvent* event) override;
};
