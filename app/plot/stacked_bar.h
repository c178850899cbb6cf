#pragma once
// One horizontal bar split into named parts with a legend underneath ("compute 1.2 s (61%)"): the
// Designer's predicted iteration-time breakdown, the Monitor's measured one.
#include <QColor>
#include <QString>
#include <QWidget>

#include <functional>
#include <vector>

namespace mwb::app {

struct BarSegment {
    QString name;
    double value = 0;
    QColor color;
};

class StackedBar : public QWidget {
    Q_OBJECT
public:
    explicit StackedBar(QWidget* parent = nullptr);
    /// `format` writes a value ("1.2 s"); the legend adds each part's share of the total.
    void setSegments(std::vector<BarSegment> segments, std::function<QString(double)> format);
    const std::vector<BarSegment>& segments() const { return segments_; }
    QSize sizeHint() const override;
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int w) const override;

protected:
    void paintEvent(QPaintEvent*) override;

private:
    int legendRows(int width) const;
    QString legendText(const BarSegment& s) const;
    std::vector<BarSegment> segments_;
    std::function<QString(double)> format_;
};

}  // namespace mwb::app
