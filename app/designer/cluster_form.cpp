#include "app/designer/cluster_form.h"

#include "app/core/format.h"
#include "app/core/wheel_guard.h"

#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>

namespace mwb::app {

ClusterForm::ClusterForm(QWidget* parent) : QGroupBox(tr("Cluster"), parent) {
    auto* form = new QFormLayout(this);
    form->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
    device_ = new QComboBox;
    device_->setObjectName(QStringLiteral("device"));
    try {
        for (const auto& d : planner::device_catalogue()) {
            device_->addItem(QString::fromStdString(d.name), QString::fromStdString(d.name));
            device_->setItemData(device_->count() - 1, QString::fromStdString(d.description), Qt::ToolTipRole);
        }
    } catch (const std::exception& e) {
        device_->addItem(tr("(no catalogue: %1)").arg(QString::fromUtf8(e.what())));
    }
    per_node_ = new QSpinBox;
    per_node_->setObjectName(QStringLiteral("gpus_per_node"));
    per_node_->setRange(1, 1024);
    nodes_ = new QSpinBox;
    nodes_->setObjectName(QStringLiteral("nodes"));
    nodes_->setRange(1, 100000);
    info_ = new QLabel;
    info_->setWordWrap(true);
    info_->setObjectName(QStringLiteral("cluster_info"));
    form->addRow(tr("Device"), device_);
    form->addRow(tr("Devices per node"), per_node_);
    form->addRow(tr("Nodes"), nodes_);
    form->addRow(QString(), info_);
    connect(device_, &QComboBox::currentIndexChanged, this, [this] {
        if (loading_) return;
        // a new device type comes with its usual node
        try {
            const auto& d = planner::find_device(planner::device_catalogue(), deviceName().toStdString());
            loading_ = true;
            per_node_->setValue(d.gpus_per_node);
            loading_ = false;
        } catch (const std::exception&) {
        }
        updateInfo();
        emit changed();
    });
    for (QWidget* w : std::initializer_list<QWidget*>{device_, per_node_, nodes_}) guard_wheel(w);
    for (QSpinBox* s : {per_node_, nodes_})
        connect(s, &QSpinBox::valueChanged, this, [this] {
            if (loading_) return;
            updateInfo();
            emit changed();
        });
    setCluster(QStringLiteral("A100-80GB"), 8, 1);
}

QString ClusterForm::deviceName() const {
    return device_->currentData().toString();
}

planner::Cluster ClusterForm::cluster() const {
    const auto& d = planner::find_device(planner::device_catalogue(), deviceName().toStdString());
    return planner::make_cluster(d, per_node_->value(), nodes_->value());
}

void ClusterForm::setCluster(const QString& device, int per_node, int nodes) {
    loading_ = true;
    const int i = device_->findData(device, Qt::UserRole, Qt::MatchFixedString);
    if (i >= 0) device_->setCurrentIndex(i);
    per_node_->setValue(per_node);
    nodes_->setValue(nodes);
    loading_ = false;
    updateInfo();
}

void ClusterForm::setWorldSize(int world) {
    world = std::max(1, world);
    loading_ = true;
    if (world < per_node_->value()) {
        per_node_->setValue(world);
        nodes_->setValue(1);
    } else {
        nodes_->setValue((world + per_node_->value() - 1) / per_node_->value());
    }
    loading_ = false;
    updateInfo();
    emit changed();
}

int ClusterForm::worldSize() const {
    return per_node_->value() * nodes_->value();
}

void ClusterForm::updateInfo() {
    try {
        const auto c = cluster();
        const auto& d = c.device;
        info_->setText(tr("%1 devices · %2 each · %3 (16-bit) / %4 (fp32) peak")
                           .arg(c.world_size())
                           .arg(format_bytes(static_cast<double>(d.memory_bytes)))
                           .arg(format_flops(d.peak_flops_16bit) + "/s", format_flops(d.peak_flops_fp32) + "/s"));
    } catch (const std::exception& e) {
        info_->setText(QString::fromUtf8(e.what()));
    }
}

}  // namespace mwb::app
