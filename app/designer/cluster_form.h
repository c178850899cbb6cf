#pragma once
// The hardware a design runs on: a device of the planner's catalogue (resources/gpus.json, the "cpu"
// entry included), devices per node, nodes. World size = devices per node × nodes.
#include "mwb/planner/cluster.h"

#include <QGroupBox>

class QComboBox;
class QSpinBox;
class QLabel;

namespace mwb::app {

class ClusterForm : public QGroupBox {
    Q_OBJECT
public:
    explicit ClusterForm(QWidget* parent = nullptr);

    planner::Cluster cluster() const;
    QString deviceName() const;
    void setCluster(const QString& device, int per_node, int nodes);
    /// Sets the world size by choosing nodes (and devices per node when fewer than a node).
    void setWorldSize(int world);
    int worldSize() const;

signals:
    void changed();

private:
    void updateInfo();
    QComboBox* device_ = nullptr;
    QSpinBox* per_node_ = nullptr;
    QSpinBox* nodes_ = nullptr;
    QLabel* info_ = nullptr;
    bool loading_ = false;
};

}  // namespace mwb::app
