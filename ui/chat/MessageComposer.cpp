#include "chat/MessageComposer.h"

#include "chat/ComposerTextEdit.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFrame>
#include <QHBoxLayout>
#include <QIcon>
#include <QKeyEvent>
#include <QLabel>
#include <QPixmap>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextCursor>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include <k3/vision.hpp>

// long: the composer's widgets, named for the tests, then their layout and connections.
MessageComposer::MessageComposer(QWidget* parent)
    : QWidget(parent), m_editor(new ComposerTextEdit(this)),
      m_sendButton(new QPushButton(tr("Send"), this)), m_think(new QCheckBox(tr("Think"), this)),
      m_effort(new QComboBox(this)), m_editingLabel(new QLabel(this)),
      m_thinkCost(new QLabel(this)), m_readingCost(new QLabel(this)),
      m_textEdit(static_cast<ComposerTextEdit*>(m_editor)), m_attachButton(new QToolButton(this)),
      m_attachmentStrip(new QWidget(this)), m_attachmentLayout(new QHBoxLayout(m_attachmentStrip)),
      m_attachError(new QLabel(this)), m_imageCost(new QLabel(this)) {
    m_editor->setObjectName(QStringLiteral("composerEditor"));
    m_sendButton->setObjectName(QStringLiteral("sendButton"));
    m_think->setObjectName(QStringLiteral("thinkCheck"));
    m_effort->setObjectName(QStringLiteral("effortCombo"));
    m_editor->setPlaceholderText(tr("Type a message (Enter sends, Shift+Enter for a new line)"));
    m_editor->setTabChangesFocus(true);
    // setFocus() on the composer (after Up, New chat, closing the find bar) must land in
    // the text box, or typed keys go to a widget that ignores them.
    setFocusProxy(m_editor);
    m_editor->setMaximumHeight(110);
    m_editor->installEventFilter(this);
    m_think->setChecked(true);
    m_think->setToolTip(tr("Let the model reason before it answers (shown collapsed)"));
    m_effort->addItems({QStringLiteral("max"), QStringLiteral("high"), QStringLiteral("medium"),
                        QStringLiteral("low")});
    m_effort->setToolTip(tr("Thinking effort"));
    m_editor->setAccessibleName(tr("Message"));
    m_sendButton->setAccessibleName(tr("Send"));
    m_effort->setAccessibleName(tr("Thinking effort"));
    m_editingLabel->setObjectName(QStringLiteral("editingLabel"));
    m_editingLabel->setText(
        tr("Editing your last message: Enter resends it and replaces the answer, "
           "Esc cancels."));
    m_editingLabel->setWordWrap(true);
    m_editingLabel->hide();
    m_thinkCost->setObjectName(QStringLiteral("thinkCost"));
    m_thinkCost->hide();
    m_attachButton->setObjectName(QStringLiteral("attachButton"));
    m_attachButton->setText(tr("Attach image…"));
    m_attachButton->setIcon(QIcon::fromTheme(QStringLiteral("mail-attachment")));
    m_attachButton->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    m_attachButton->setAccessibleName(tr("Attach image"));
    m_attachmentStrip->setObjectName(QStringLiteral("attachmentStrip"));
    m_attachmentLayout->setContentsMargins(0, 0, 0, 0);
    m_attachmentLayout->addStretch(1);
    m_attachmentStrip->hide();
    m_attachError->setObjectName(QStringLiteral("attachError"));
    m_attachError->setWordWrap(true);
    m_attachError->setTextFormat(Qt::PlainText); // file names and engine text, never markup
    m_attachError->hide();
    m_imageCost->setObjectName(QStringLiteral("imageCost"));
    m_imageCost->setForegroundRole(QPalette::PlaceholderText);
    m_imageCost->hide();
    setImagesAvailable(false, tr("Load a model first (Model menu)"));
    m_readingCost->setObjectName(QStringLiteral("readingCost"));
    m_readingCost->setForegroundRole(QPalette::PlaceholderText);
    m_readingCost->hide();

    auto* options = new QHBoxLayout;
    options->addWidget(m_think);
    options->addWidget(new QLabel(tr("Effort:"), this));
    options->addWidget(m_effort);
    options->addWidget(m_thinkCost);
    options->addStretch(1);
    options->addWidget(m_attachButton);
    options->addWidget(m_readingCost);
    auto* input = new QHBoxLayout;
    input->addWidget(m_editor, 1);
    input->addWidget(m_sendButton, 0, Qt::AlignBottom);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(options);
    layout->addWidget(m_editingLabel);
    layout->addWidget(m_attachmentStrip);
    layout->addWidget(m_imageCost);
    layout->addWidget(m_attachError);
    layout->addLayout(input);

    connect(m_sendButton, &QPushButton::clicked, this, [this] {
        if (m_generating)
            emit stopRequested();
        else
            trySend();
    });
    connect(m_editor, &QPlainTextEdit::textChanged, this, &MessageComposer::updateSendButton);
    connect(m_editor, &QPlainTextEdit::textChanged, this, &MessageComposer::textChanged);
    connect(m_attachButton, &QToolButton::clicked, this, &MessageComposer::openImageDialog);
    connect(m_textEdit, &ComposerTextEdit::filesGiven, this, &MessageComposer::chooseImageFiles);
    connect(m_textEdit, &ComposerTextEdit::imagePasted, this, [this](const QImage& image) {
        m_attachError->hide();
        emit imagePasted(image);
    });
    connect(m_think, &QCheckBox::toggled, m_effort, &QWidget::setEnabled);
    connect(m_think, &QCheckBox::clicked, this, &MessageComposer::thinkingChosen);
    connect(m_effort, &QComboBox::currentTextChanged, this,
            &MessageComposer::thinkingEffortChanged);
    updateSendButton();
}

QString MessageComposer::text() const {
    return m_editor->toPlainText();
}

void MessageComposer::setText(const QString& text) {
    m_editor->setPlainText(text);
    m_editor->moveCursor(QTextCursor::End);
}

void MessageComposer::clear() {
    m_editor->clear();
}

void MessageComposer::setEditing(bool editing, bool earlier) {
    m_editing = editing;
    m_editingLabel->setText(
        earlier ? tr("Editing an earlier message: Enter resends it and answers from there (what "
                     "followed stays as the other version), Esc cancels.")
                : tr("Editing your last message: Enter resends it and replaces the answer, "
                     "Esc cancels."));
    m_editingLabel->setVisible(editing);
    m_sendButton->setText(m_generating ? tr("Stop") : editing ? tr("Resend") : tr("Send"));
    m_sendButton->setAccessibleName(m_sendButton->text());
}

void MessageComposer::setReady(bool ready) {
    m_ready = ready;
    updateSendButton();
}

void MessageComposer::setGenerating(bool generating) {
    m_generating = generating;
    m_sendButton->setText(generating ? tr("Stop") : m_editing ? tr("Resend") : tr("Send"));
    m_sendButton->setAccessibleName(m_sendButton->text());
    updateSendButton();
}

bool MessageComposer::thinking() const {
    return m_think->isChecked();
}
void MessageComposer::setThinking(bool on) {
    m_think->setChecked(on && m_thinkingAvailable);
}
void MessageComposer::setThinkingAvailable(bool available) {
    m_thinkingAvailable = available;
    m_think->setEnabled(available);
    if (!available) m_think->setChecked(false);
    if (!available) m_thinkCost->hide(); // nothing to cost: Think cannot be ticked
    m_think->setToolTip(available ? tr("Let the model reason before it answers (shown collapsed)")
                                  : tr("This model answers without thinking"));
}
QString MessageComposer::thinkingEffort() const {
    return m_effort->currentText();
}

void MessageComposer::setThinkingEffort(const QString& effort) {
    m_effort->setCurrentText(effort);
}

void MessageComposer::setThinkingCost(int positions, double seconds) {
    if (m_secondsPerPosition != seconds) {
        m_secondsPerPosition = seconds;
        showAttachments(); // the images' cost quotes the same rate
    }
    // A model without a think channel (the demo) showed "+169 prompt positions" beside a
    // Think it cannot tick.
    m_thinkCost->setVisible(positions > 0 && m_thinkingAvailable);
    if (positions <= 0) {
        m_thinkCost->clear();
        return;
    }
    QString text =
        positions == 1 ? tr("+1 prompt position") : tr("+%1 prompt positions").arg(positions);
    const double total = seconds >= 0 ? seconds * positions : -1;
    if (total >= 1) {
        const int s = int(std::ceil(total));
        text += s >= 120 ? tr(" · about %1 min").arg((s + 30) / 60) : tr(" · about %1 s").arg(s);
    }
    m_thinkCost->setText(text);
    m_thinkCost->setToolTip(
        tr("Think adds the thinking-effort message and the think channel to the prompt of "
           "every new conversation: this many positions to read before the first token%1.")
            .arg(total >= 1 ? tr(", at the rate this computer read the last message") : QString()));
}

void MessageComposer::setReadingCost(double seconds) {
    // A second or two is not worth a word; a streamed trunk's pass (a minute or more on
    // the real model) is paid before every first token, and was said only afterwards.
    m_generalCost.clear();
    if (seconds >= kCostShownSeconds) {
        const int s = int(std::ceil(seconds));
        m_generalCost =
            s >= 120 ? tr("a message: about %1 min before its answer starts").arg((s + 30) / 60)
                     : tr("a message: about %1 s before its answer starts").arg(s);
    }
    showReadingCost();
}

QString MessageComposer::readingPositionsText(int positions, double seconds) {
    const int s = int(std::ceil(seconds));
    const QString time = s >= 120 ? tr("about %1 min at your budget").arg((s + 30) / 60)
                                  : tr("about %1 s at your budget").arg(std::max(1, s));
    return positions == 1 ? tr("this message will read 1 position (%1)").arg(time)
                          : tr("this message will read %1 positions (%2)").arg(positions).arg(time);
}

void MessageComposer::setReadingPositions(int positions, double seconds) {
    m_messageCost = positions > 0 && seconds >= kCostShownSeconds
                        ? readingPositionsText(positions, seconds)
                        : QString();
    showReadingCost();
}

void MessageComposer::showReadingCost() {
    const QString text = m_messageCost.isEmpty() ? m_generalCost : m_messageCost;
    m_readingCost->setText(text);
    m_readingCost->setVisible(!text.isEmpty());
    m_readingCost->setToolTip(
        m_messageCost.isEmpty()
            ? tr("Each message is read through every layer not held in memory before the "
                 "first token (a long conversation read again takes one such pass per chunk). "
                 "Measured on the last message, else from the memory plan and this disk's "
                 "speed.")
            : tr("The prompt positions of this conversation and message that neither memory "
                 "nor a saved state holds: they are read before the first token (a "
                 "conversation whose saved state is gone is read again whole)."));
}

QString MessageComposer::readingCostText() const {
    return m_readingCost->isHidden() ? QString() : m_readingCost->text();
}

QString MessageComposer::thinkingCostText() const {
    return m_thinkCost->isHidden() ? QString() : m_thinkCost->text();
}

void MessageComposer::setImagesAvailable(bool available, const QString& whyNot) {
    m_imagesAvailable = available;
    m_textEdit->setAcceptsImages(available);
    m_attachButton->setEnabled(available);
    m_attachButton->setToolTip(
        available ? tr("Attach an image (PNG, JPEG or WebP); you can also paste or drop one")
                  : whyNot);
}

void MessageComposer::openImageDialog() {
    const QStringList files =
        QFileDialog::getOpenFileNames(this, tr("Attach images"), QString(),
                                      tr("Images (*.png *.jpg *.jpeg *.webp);;All files (*)"));
    if (!files.isEmpty()) chooseImageFiles(files);
}

void MessageComposer::chooseImageFiles(const QStringList& paths) {
    if (!m_imagesAvailable || paths.isEmpty()) return;
    m_attachError->hide();
    emit imageFilesChosen(paths);
}

void MessageComposer::addAttachment(const ImageAttachment& attachment) {
    m_attachments.push_back(attachment);
    countPositions(m_attachments.back());
    m_attachError->hide();
    showAttachments();
}

void MessageComposer::removeAttachment(int index) {
    if (index < 0 || index >= m_attachments.size()) return;
    m_attachments.removeAt(index);
    showAttachments();
}

void MessageComposer::clearAttachments() {
    m_attachments.clear();
    showAttachments();
}

void MessageComposer::showAttachError(const QString& message) {
    m_attachError->setText(tr("Not attached: %1").arg(message));
    m_attachError->show();
}

QString MessageComposer::attachErrorText() const {
    return m_attachError->isHidden() ? QString() : m_attachError->text();
}

void MessageComposer::showAttachments() {
    // Rebuilt whole: a handful of thumbnails at most.
    while (m_attachmentLayout->count() > 1) {
        QLayoutItem* item = m_attachmentLayout->takeAt(0);
        // Later: a thumbnail's own remove button may be what is being clicked.
        item->widget()->hide();
        item->widget()->setParent(nullptr);
        item->widget()->deleteLater();
        delete item;
    }
    for (int i = 0; i < m_attachments.size(); ++i) {
        const ImageAttachment& a = m_attachments[i];
        auto* frame = new QFrame(m_attachmentStrip);
        frame->setObjectName(QStringLiteral("attachment"));
        frame->setFrameShape(QFrame::StyledPanel);
        auto* thumbnail = new QLabel(frame);
        thumbnail->setPixmap(QPixmap::fromImage(a.thumbnail));
        const QString about = tr("%1, %2×%3: %n prompt position(s)", nullptr, a.positions)
                                  .arg(a.name)
                                  .arg(a.size.width())
                                  .arg(a.size.height());
        thumbnail->setToolTip(about);
        thumbnail->setAccessibleName(about);
        auto* remove = new QToolButton(frame);
        remove->setObjectName(QStringLiteral("removeAttachment"));
        remove->setText(QStringLiteral("✕"));
        remove->setToolTip(tr("Remove %1").arg(a.name));
        remove->setAccessibleName(tr("Remove %1").arg(a.name));
        connect(remove, &QToolButton::clicked, this, [this, i] { removeAttachment(i); });
        auto* box = new QHBoxLayout(frame);
        box->setContentsMargins(2, 2, 2, 2);
        box->addWidget(thumbnail);
        box->addWidget(remove, 0, Qt::AlignTop);
        m_attachmentLayout->insertWidget(i, frame);
    }
    m_attachmentStrip->setVisible(!m_attachments.isEmpty());
    int positions = 0;
    for (const ImageAttachment& a : std::as_const(m_attachments)) positions += a.positions;
    m_imageCost->setText(imageCostText(int(m_attachments.size()), positions, m_secondsPerPosition));
    m_imageCost->setVisible(!m_attachments.isEmpty() && m_imageCostKnown);
    updateSendButton();
}

QString MessageComposer::imageCostText(int images, int positions, double secondsPerPosition) {
    if (images <= 0) return {};
    const QString cost =
        positions == 1 ? tr("1 prompt position") : tr("%1 prompt positions").arg(positions);
    QString text = images == 1 ? tr("this image will cost %1").arg(cost)
                               : tr("these %1 images will cost %2").arg(images).arg(cost);
    const double total = secondsPerPosition >= 0 ? secondsPerPosition * positions : -1;
    if (total >= 1) {
        const int s = int(std::ceil(total));
        text += s >= 120 ? tr(", about %1 min at your budget").arg((s + 30) / 60)
                         : tr(", about %1 s at your budget").arg(s);
    }
    return text;
}

void MessageComposer::setImagePatchLimit(int patches) {
    if (patches == m_imagePatchLimit) return;
    m_imagePatchLimit = patches;
    for (ImageAttachment& a : m_attachments) countPositions(a);
    showAttachments();
}

void MessageComposer::setImageCostKnown(bool known) {
    m_imageCostKnown = known;
    showAttachments();
}

void MessageComposer::countPositions(ImageAttachment& attachment) const {
    if (m_imagePatchLimit <= 0 || attachment.size.isEmpty()) return;
    attachment.positions = k3::planImage(attachment.size.width(), attachment.size.height(),
                                         std::clamp(m_imagePatchLimit, 1, k3::kOfficialPatchLimit))
                               .tokens();
}

QString MessageComposer::imageCostShown() const {
    return m_imageCost->isHidden() ? QString() : m_imageCost->text();
}

bool MessageComposer::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_editor && event->type() == QEvent::KeyPress) {
        auto* key = static_cast<QKeyEvent*>(event);
        const bool enter = key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter;
        if (enter && !(key->modifiers() & Qt::ShiftModifier)) {
            trySend();
            return true;
        }
        if (key->key() == Qt::Key_Up && key->modifiers() == Qt::NoModifier && text().isEmpty() &&
            !m_generating) {
            emit editLastRequested();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void MessageComposer::trySend() {
    const QString message = text().trimmed();
    if (!m_ready || m_generating || (message.isEmpty() && m_attachments.isEmpty())) return;
    m_attachError->hide();
    emit sendRequested(message);
    clear();
}

void MessageComposer::updateSendButton() {
    if (m_generating) {
        m_sendButton->setEnabled(true);
        m_sendButton->setToolTip(tr("Stop the answer (Esc)"));
        return;
    }
    m_sendButton->setEnabled(m_ready && (!text().trimmed().isEmpty() || !m_attachments.isEmpty()));
    m_sendButton->setToolTip(m_ready ? QString() : tr("Load a model first (Model menu)"));
}
