#pragma once
// k3::LaunchConfig as a Qt meta type (queued calls to the engine thread, signals). Every
// header that names it in a signal or slot includes this one, so moc never instantiates
// the meta type before it is declared.

#include <QMetaType>

#include <k3/launch.hpp>

Q_DECLARE_METATYPE(k3::LaunchConfig)
